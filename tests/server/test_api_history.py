"""A request's history (the messages the stored branch lacks) is stored and
indexed all or none: a store failure midway leaves no half history, and the
same request sent again finds nothing of it and stores it whole."""

from __future__ import annotations

import sqlite3

from tests.server.conftest import request

FAIL_SECOND_INDEX_ROW = """
CREATE TRIGGER fail_midway BEFORE INSERT ON api_messages
WHEN (SELECT count(*) FROM api_messages) >= {rows}
BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"""


def ask(served, messages: list[dict]):
    return request(served.url, "POST", "/v1/chat/completions",
                   {"model": "tiny", "messages": messages, "max_tokens": 4})


def rows(db, table: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def fail_after(db, rows: int | None) -> None:
    """The index refuses rows past ``rows`` (None: lifts it), as a full disk would."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER IF EXISTS fail_midway")
        if rows is not None:
            conn.execute(FAIL_SECOND_INDEX_ROW.format(rows=rows))


def branch(served) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in served.conv.store.most_recent_session().messages]


def test_a_new_sessions_history_is_stored_whole_or_not_at_all(served, tmp_path):
    db = tmp_path / "s.db"
    history = [{"role": "user", "content": "First question."},
               {"role": "assistant", "content": "First answer."},
               {"role": "user", "content": "Second question."},
               {"role": "assistant", "content": "Second answer."}]
    messages = history + [{"role": "user", "content": "Third question."}]
    fail_after(db, 2)  # the history's third message cannot be indexed
    refused = ask(served, messages)
    assert refused.status >= 400 and "full" in refused.json()["error"]["message"]
    assert rows(db, "api_messages") == 0 and rows(db, "messages") == 0
    fail_after(db, None)
    answered = ask(served, messages)
    assert answered.status == 200, answered.body
    assert branch(served)[:5] == [(m["role"], m["content"]) for m in messages]
    assert rows(db, "api_messages") == 6  # each message of the request, and the reply


def test_a_branch_of_a_stored_session_is_added_whole_or_not_at_all(served, tmp_path):
    db = tmp_path / "s.db"
    first = [{"role": "user", "content": "First question."}]
    assert ask(served, first).status == 200
    indexed, stored = rows(db, "api_messages"), rows(db, "messages")
    edited = first + [{"role": "assistant", "content": "An answer the client wrote."},
                      {"role": "user", "content": "Second question."},
                      {"role": "assistant", "content": "Second answer."},
                      {"role": "user", "content": "Third question."}]
    fail_after(db, indexed + 1)  # the branch's second new message cannot be indexed
    assert ask(served, edited).status >= 400
    assert rows(db, "api_messages") == indexed and rows(db, "messages") == stored
    fail_after(db, None)
    assert ask(served, edited).status == 200
    assert branch(served)[:5] == [(m["role"], m["content"]) for m in edited]
