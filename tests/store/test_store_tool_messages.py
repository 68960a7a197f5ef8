"""The messages table rebuilt for tool messages: a database at the version
before it, full of rows that point at messages, migrates with every row, id,
reference, index, trigger and search intact, and takes tool messages after."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mlxchat.chat import CalledTool, Message
from mlxchat.store import SCHEMA_VERSION, StoreError, open_store
from mlxchat.store.export import render_session
from mlxchat.store.importing import import_json
from mlxchat.store.messages_rebuild import messages_with_tool_role
from mlxchat.store.schema import MIGRATIONS, V13_TOOL_MESSAGES

from tests.store.old_versions import database_at

BEFORE = MIGRATIONS.index(V13_TOOL_MESSAGES)
"""The version just before the rebuild."""


def _database_before(path: Path) -> None:
    conn = database_at(path, BEFORE)
    conn.execute("INSERT INTO sessions (id, title, created, updated) VALUES (1, 'old', 1, 1)")
    rows = [(1, None, "user", "about pelicans", b"\x01\x00\x00\x00", "k", 1),
            (2, 1, "assistant", "pelicans fly", b"\x02\x00\x00\x00", "k", 0),
            (3, 2, "user", "and herons?", None, None, 0),
            (9, 2, "user", "a deleted branch's last id", None, None, 0)]
    for row in rows:
        conn.execute("INSERT INTO messages (id, session_id, parent_id, role, content, token_ids,"
                     " ledger_key, ledger_start, created) VALUES (?, 1, ?, ?, ?, ?, ?, ?, 5)",
                     row)
    conn.execute("DELETE FROM messages WHERE id = 9")
    conn.execute("UPDATE sessions SET leaf_id = 3 WHERE id = 1")
    conn.execute("INSERT INTO kv_segments (session_id, message_id, start_token, end_token, path,"
                 " checksum, file_bytes, token_ids, created) VALUES (1, 2, 0, 2, 'a', 'c', 1,"
                 " x'', 1)")
    conn.execute("INSERT INTO api_messages VALUES (2, 1, 'hash-of-2', 1)")
    conn.execute("INSERT INTO drafts (session_id, parent_id, content, updated)"
                 " VALUES (1, 3, 'half', 1)")
    conn.close()


def test_a_database_before_tool_messages_migrates_with_its_data(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _database_before(path)
    store = open_store(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 0  # a fresh connection's
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE tbl_name ="
                                        " 'messages' AND type IN ('index', 'trigger')")}
    assert {"messages_by_session", "messages_by_parent", "messages_fts_insert",
            "messages_fts_delete", "messages_fts_update"} <= names
    assert "messages_rebuilt" not in str(conn.execute("SELECT group_concat(sql) FROM"
                                                      " sqlite_master").fetchone()[0])
    old = store.get_session(1)
    assert [(m.id, m.parent_id, m.content) for m in old.messages] == [
        (1, None, "about pelicans"), (2, 1, "pelicans fly"), (3, 2, "and herons?")]
    assert old.messages[0].token_ids == [1] and old.messages[0].ledger_start
    assert old.leaf_id == 3
    # Rows that point at messages still do, and still cascade.
    assert conn.execute("SELECT message_id FROM kv_segments").fetchall() == [(2,)]
    assert store.api.longest(["hash-of-2"]).message_id == 2  # type: ignore[union-attr]
    assert [r.id for r in store.list_sessions(search="pelicans")] == [1]
    # A tool message and a reply's calls are stored; ids deleted before are not reused.
    call = CalledTool("get_weather", {"city": "Paris"}, "call_1")
    reply = store.add_message(1, "assistant", "", tool_calls=(call,))
    result = store.add_message(1, "tool", "sunny", tool_call_id="call_1",
                               tool_name="get_weather")
    assert reply.id is not None and reply.id > 9
    again = store.get_session(1).messages
    assert again[-2].tool_calls == (call,)
    assert (again[-1].role, again[-1].tool_call_id, again[-1].tool_name) == (
        "tool", "call_1", "get_weather")
    assert [r.id for r in store.list_sessions(search="sunny")] == [1]
    store.delete_session(1)
    assert conn.execute("SELECT count(*) FROM kv_segments").fetchone()[0] == 0
    assert result.id is not None
    store.close()


def test_a_rebuild_that_finds_broken_references_leaves_the_old_version(tmp_path: Path) -> None:
    path = tmp_path / "broken.db"
    _database_before(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("INSERT INTO api_messages VALUES (77, 1, 'dangling', 1)")  # foreign keys off
    conn.close()
    with pytest.raises(StoreError, match="broken references"):
        open_store(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == BEFORE
    check = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    assert "'tool'" not in check


def test_a_tools_branch_database_without_sources_migrates_keeping_its_calls(
        tmp_path: Path) -> None:
    """A database made before the merge on the tools branch: at the version
    before the rebuild, with tool messages and calls but no ``sources``."""
    path = tmp_path / "dev.db"
    _database_before(path)
    conn = sqlite3.connect(path, isolation_level=None)
    messages_with_tool_role(conn)
    conn.execute("ALTER TABLE messages DROP COLUMN sources")
    conn.execute("INSERT INTO messages (id, session_id, parent_id, role, content, created,"
                 " tool_calls) VALUES (10, 1, 3, 'assistant', '', 5, ?)",
                 ('[{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "c1"}]',))
    conn.execute("INSERT INTO messages (id, session_id, parent_id, role, content, created,"
                 " tool_call_id, tool_name) VALUES (11, 1, 10, 'tool', 'sunny', 5, 'c1',"
                 " 'get_weather')")
    conn.execute("UPDATE sessions SET leaf_id = 11 WHERE id = 1")
    conn.execute(f"PRAGMA user_version = {BEFORE}")
    conn.close()
    store = open_store(path)
    messages = store.get_session(1).messages
    assert messages[-2].tool_calls == (CalledTool("get_weather", {"city": "Paris"}, "c1"),)
    assert (messages[-1].role, messages[-1].tool_call_id, messages[-1].tool_name) == (
        "tool", "c1", "get_weather")
    assert [m.sources for m in messages] == [None] * 5
    store.close()


def test_a_tool_loop_exports_quoted_under_its_tool_and_imports_back(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    s = store.create_session("m")
    call = CalledTool("get_weather", {"city": "Paris"}, "call_1")
    store.add_message(s.id, "user", "Weather?")
    store.add_message(s.id, "assistant", "Checking.", tool_calls=(call,))
    store.add_message(s.id, "tool", '{"sky": "clear"}\nwindy', tool_call_id="call_1",
                      tool_name="get_weather")
    store.add_message(s.id, "assistant", "Clear and windy.")
    text = render_session(store, s.id, "md")
    assert "### Tool result · get_weather\n\n> {\"sky\": \"clear\"}\n> windy\n" in text
    assert '#### Tool calls\n\n→ get_weather({"city": "Paris"})' in text
    copy = import_json(store, render_session(store, s.id, "json").encode())
    assert [(m.role, m.tool_calls, m.tool_call_id, m.tool_name) for m in copy.messages] == [
        ("user", (), None, None), ("assistant", (call,), None, None),
        ("tool", (), "call_1", "get_weather"), ("assistant", (), None, None)]
    store.close()


def test_several_results_are_stored_together_or_not_at_all(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    session = store.create_session("t", "m")
    assert session.id is not None
    store.add_message(session.id, "user", "Weather?")
    reply = store.add_message(session.id, "assistant", "", tool_calls=(
        CalledTool("get_weather", {"city": "Paris"}, "c1"),
        CalledTool("get_weather", {"city": "Oslo"}, "c2")))
    first = Message("tool", "sunny", token_ids=[5, 6], ledger_key="k", tool_call_id="c1",
                    tool_name="get_weather")
    broken = Message("nobody", "snow")  # fails as it is inserted, after the first
    with pytest.raises(StoreError, match="Unknown message role"):
        store.add_messages(session.id, [first, broken])
    assert store.get_session(session.id).leaf_id == reply.id
    assert [m.role for m in store.all_messages(session.id)] == ["user", "assistant"]
    second = Message("tool", "snow", token_ids=[], ledger_key="k", tool_call_id="c2",
                     tool_name="get_weather")
    added = store.add_messages(session.id, [first, second])
    path = store.branch_path(added[-1].id)
    assert [(m.content, m.parent_id, m.token_ids, m.tool_call_id) for m in path[2:]] == [
        ("sunny", reply.id, [5, 6], "c1"), ("snow", added[0].id, [], "c2")]
    assert store.get_session(session.id).leaf_id == added[-1].id
    store.close()
