"""Schema version 20: the responses the HTTP API stored (``api_responses``),
and the database's key for what the API hands out to be sent back unchanged,
drawn once."""

from __future__ import annotations

import secrets
import sqlite3


def _draw_key(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO api_response_key (one, key) VALUES (1, ?)",
                 (secrets.token_hex(32),))


V20_API_RESPONSES = (
    # A response is gone with its reply (or its session): a follow-up on it
    # would continue a conversation that no longer exists.
    """
    CREATE TABLE api_responses (
        id TEXT PRIMARY KEY,
        session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        created REAL NOT NULL,
        body TEXT NOT NULL,
        input TEXT NOT NULL
    )
    """,
    "CREATE INDEX api_responses_by_session ON api_responses(session_id)",
    "CREATE INDEX api_responses_by_message ON api_responses(message_id)",
    # The database's own key for what the API hands out to be sent back
    # unchanged (a reasoning item's encrypted_content): checked as ours.
    "CREATE TABLE api_response_key (one INTEGER PRIMARY KEY CHECK (one = 1), key TEXT NOT NULL)",
    _draw_key,
)
