"""Long conversations: a chain of thousands of messages is deleted, undone,
forked, exported, imported and listed without SQLite's trigger depth (1,000),
and a delete is all or nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mlxchat.chat import Message
from mlxchat.store import SCHEMA_VERSION, SessionStore, StoreError, open_store
from mlxchat.store.export import render_session
from mlxchat.store.importing import import_json

from tests.store.old_versions import database_at

LONG = 5_000


def _chain(store: SessionStore, count: int = LONG) -> tuple[int, list[int]]:
    """A session of ``count`` messages, user and assistant in turn, in one chain."""
    session = store.create_session("m")
    assert session.id is not None
    stored = store.add_messages(session.id, [
        Message("user" if i % 2 == 0 else "assistant", f"turn {i} kestrel") for i in range(count)])
    return session.id, [m.id for m in stored if m.id is not None]


def _count(store: SessionStore, sql: str, *args: object) -> int:
    conn = sqlite3.connect(store.path)
    try:
        return int(conn.execute(sql, args).fetchone()[0])
    finally:
        conn.close()


def test_a_session_of_5000_messages_in_one_chain_is_deleted(store: SessionStore) -> None:
    other, _ = _chain(store, 4)
    session_id, ids = _chain(store)
    store.segments.record(session_id, ids[-1], start=0, end=2, path="seg", checksum="c",
                          file_bytes=1, kv_bits=None, token_ids=[1, 2])
    store.api.record(session_id, ids[2_000], "hash-of-2000")
    store.drafts.save(session_id, ids[-1], "half a reply")
    store.delete_session(session_id)
    with pytest.raises(StoreError, match="no session"):
        store.get_session(session_id)
    assert _count(store, "SELECT count(*) FROM messages WHERE session_id = ?", session_id) == 0
    for table in ("kv_segments", "api_messages", "drafts"):
        assert _count(store, f"SELECT count(*) FROM {table}") == 0
    assert [s.id for s in store.list_sessions(search="kestrel")] == [other]
    assert len(store.get_session(other).messages) == 4


def test_a_delete_that_fails_leaves_every_message(store: SessionStore) -> None:
    session_id, ids = _chain(store)
    conn = sqlite3.connect(store.path)
    conn.execute("CREATE TRIGGER refuse BEFORE DELETE ON sessions"
                 " BEGIN SELECT RAISE(ABORT, 'refused here'); END")
    conn.commit()
    with pytest.raises(StoreError, match="refused here"):
        store.delete_session(session_id)  # refused at its last statement
    assert [m.id for m in store.get_session(session_id).messages] == ids
    assert _count(store, "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'kestrel'"
                  ) == LONG
    conn.execute("DROP TRIGGER refuse")
    conn.commit()
    conn.close()
    store.delete_session(session_id)
    assert store.list_sessions() == []


def test_a_long_chain_is_undone_branched_and_listed(store: SessionStore) -> None:
    session_id, ids = _chain(store)
    back = 3_000
    store.branches.set_leaf(session_id, ids[-back - 1])  # undo 3,000 messages
    edited = store.add_message(session_id, "user", "another way")
    assert len(store.get_session(session_id).messages) == LONG - back + 1
    assert store.get_session(session_id).title == "turn 0 kestrel"  # not the first question
    retries = [store.add_message(session_id, "assistant", f"retry {i}", parent_id=ids[i]).id
               for i in range(0, 40, 2)]  # a second reply to each of the first 20 questions
    store.branches.set_leaf(session_id, edited.id)
    infos = {b.leaf_id: b for b in store.branches.of(session_id)}
    assert set(infos) == {ids[-1], edited.id, *retries}
    assert infos[ids[-1]].message_count == LONG and not infos[ids[-1]].current
    assert infos[ids[-1]].diverges_at == ids[-back]
    assert (infos[edited.id].message_count, infos[edited.id].diverges_at) == (
        LONG - back + 1, edited.id)
    assert infos[edited.id].current
    for i, retry in zip(range(0, 40, 2), retries):
        assert (infos[retry].message_count, infos[retry].diverges_at) == (i + 2, retry)
    store.branches.switch(session_id, ids[0])  # the newest branch through the root
    assert store.get_session(session_id).leaf_id == retries[-1]
    assert store.branches.leaves_holding(session_id, ids[LONG - back]) == [ids[-1]]
    store.delete_session(session_id)


def test_a_long_chain_is_forked_exported_and_imported(store: SessionStore) -> None:
    session_id, ids = _chain(store)
    fork = store.branches.fork(session_id)
    imported = import_json(store, render_session(store, session_id, "json").encode())
    texts = [m.content for m in store.get_session(session_id).messages]
    store.delete_session(session_id)
    for copy in (fork, imported):
        assert copy.id is not None
        assert [m.content for m in store.get_session(copy.id).messages] == texts
        store.delete_session(copy.id)
    assert store.list_sessions() == [] and len(texts) == LONG


def test_a_tail_deletes_in_one_statement_and_no_message_is_left_without_its_parent(
        store: SessionStore) -> None:
    """A message's parent link cascades nowhere: a statement deleting a subtree
    (its ids from a recursive CTE, which has no depth limit) works however deep
    it is, and one that would leave a message without its parent fails."""
    session_id, ids = _chain(store)
    store.branches.set_leaf(session_id, ids[1_999])
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        conn.execute("DELETE FROM messages WHERE id = ?", (ids[2_000],))
    conn.execute("""
        WITH RECURSIVE below(id) AS (
            SELECT ? UNION ALL SELECT m.id FROM messages AS m JOIN below ON m.parent_id = below.id
        )
        DELETE FROM messages WHERE id IN below""", (ids[2_000],))
    conn.close()
    assert [m.id for m in store.get_session(session_id).messages] == ids[:2_000]
    assert [b.leaf_id for b in store.branches.of(session_id)] == [ids[1_999]]


def _database_at_17(path: Path, count: int) -> None:
    """A version-17 database with one chain of ``count`` messages and rows that
    name them, as that version's mlxchat wrote them."""
    conn = database_at(path, 17)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO sessions (id, title, created, updated) VALUES (1, 'old', 1, 1)")
    conn.executemany(
        "INSERT INTO messages (id, session_id, parent_id, role, content, created)"
        " VALUES (?, 1, ?, ?, ?, 5)",
        [(i, i - 1 if i > 1 else None, "user" if i % 2 else "assistant", f"old heron {i}")
         for i in range(1, count + 1)])
    conn.execute("UPDATE sessions SET leaf_id = ? WHERE id = 1", (count,))
    conn.execute("INSERT INTO kv_segments (session_id, message_id, start_token, end_token, path,"
                 " checksum, file_bytes, token_ids, created) VALUES (1, ?, 0, 2, 'a', 'c', 1,"
                 " x'', 1)", (count,))
    conn.execute("INSERT INTO api_messages VALUES (?, 1, 'hash', 1)", (count - 1,))
    conn.execute("INSERT INTO drafts (session_id, parent_id, content, updated)"
                 " VALUES (1, ?, 'half', 1)", (count,))
    conn.execute("COMMIT")
    conn.close()


def test_a_version_17_database_migrates_and_its_long_chain_deletes(tmp_path: Path) -> None:
    path = tmp_path / "v17.db"
    count = 2_001
    _database_at_17(path, count)
    store = open_store(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    links = {row[3]: row[6] for row in conn.execute("PRAGMA foreign_key_list(messages)")}
    assert links == {"parent_id": "NO ACTION", "session_id": "CASCADE"}
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"messages_by_session", "messages_by_parent", "messages_fts_insert",
            "messages_fts_delete", "messages_fts_update", "sessions_by_leaf",
            "snapshots_by_leaf", "drafts_by_parent"} <= names
    old = store.get_session(1)
    assert [m.id for m in old.messages] == list(range(1, count + 1))
    assert [r.id for r in store.list_sessions(search="heron")] == [1]
    assert store.api.longest(["hash"]).message_id == count - 1  # type: ignore[union-attr]
    store.delete_session(1)
    for table in ("messages", "kv_segments", "api_messages", "drafts", "messages_fts"):
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
    conn.close()
    store.close()
