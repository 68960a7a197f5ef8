"""Summary messages (schema 22): stored with what they stand for, read back,
forked and exported with it; a branch's KV segments start over at its newest
summary (the rows above it were saved for the uncompacted ledger) and come
back whole once the branch steps back above it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mlxchat.chat import Compaction, Message
from mlxchat.store import SessionStore, open_store

from tests.store.old_versions import database_at


def _segment(store: SessionStore, sid: int, message_id: int, start: int, end: int) -> None:
    store.segments.record(sid, message_id, start=start, end=end, path=f"seg-{message_id}",
                          checksum="c", file_bytes=1, kv_bits=None,
                          token_ids=list(range(start, end)))


def _compacted(store: SessionStore) -> tuple[int, list[Message], Message]:
    s = store.create_session("m")
    history = [store.add_message(s.id, role, text) for role, text in
               (("user", "one"), ("assistant", "1"), ("user", "two"), ("assistant", "2"))]
    summary, = store.add_messages(s.id, [Message(
        "summary", "They counted to two.", token_ids=[7, 8, 9], ledger_key="k",
        ledger_start=True, compaction=Compaction(kept=2, summarized=2, summary_tokens=5))])
    return s.id, history, summary


def test_a_summary_is_stored_and_read_with_what_it_stands_for(store: SessionStore) -> None:
    sid, history, summary = _compacted(store)
    branch = store.get_session(sid).messages
    assert [m.role for m in branch] == ["user", "assistant", "user", "assistant", "summary"]
    assert branch[-1].compaction == Compaction(kept=2, summarized=2, summary_tokens=5)
    assert branch[-1].compaction.headline() == "2 messages summarized in 5 tokens"
    fork = store.branches.fork(sid)
    assert fork.messages[-1].compaction == branch[-1].compaction  # kept: no ids to remap
    assert {r.id for r in store.list_sessions(search="counted")} == {fork.id, sid}


def test_the_branch_segments_start_over_at_its_newest_summary(store: SessionStore) -> None:
    sid, history, summary = _compacted(store)
    _segment(store, sid, history[1].id, 0, 10)
    _segment(store, sid, history[3].id, 10, 20)  # starts where the summary's row ends
    _segment(store, sid, summary.id, 0, 10)
    assert [(r.message_id, r.start) for r in store.segments.on_branch(summary.id)] == [
        (summary.id, 0)]
    # Above the summary (/compact undo), the uncompacted ledger's rows are the branch's.
    assert [(r.message_id, r.start) for r in store.segments.on_branch(history[3].id)] == [
        (history[1].id, 0), (history[3].id, 10)]


def test_a_v21_database_takes_summaries_after_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "v21.db"
    conn = database_at(path, 21)
    conn.execute("INSERT INTO sessions (title, created, updated) VALUES ('old', 1, 1)")
    conn.execute("INSERT INTO messages (session_id, role, content, created) "
                 "VALUES (1, 'user', 'kept as it was', 1)")
    conn.execute("UPDATE sessions SET leaf_id = 1")
    conn.close()
    store = open_store(path)
    assert store.get_session(1).messages[0].content == "kept as it was"
    store.add_messages(1, [Message("summary", "s", compaction=Compaction(kept=1))])
    assert store.get_session(1).messages[-1].compaction == Compaction(kept=1)
    store.close()
    raw = sqlite3.connect(path)
    raw.execute("UPDATE messages SET compaction = 'not json' WHERE role = 'summary'")
    raw.commit()
    raw.close()
    store = open_store(path)
    assert store.get_session(1).messages[-1].compaction is None  # read as none: left out
    store.close()
