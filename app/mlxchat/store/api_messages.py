"""The index of messages the HTTP API saw: each keyed by the hash of the
conversation up to and including it, so a stateless request (the whole message
list every time) finds the stored branch it extends by looking hashes up,
without rendering or reading any history."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Sequence

from mlxchat.store.database import Database
from mlxchat.store.rows import check_message

_CHUNK = 500
"""Hashes per query: well under SQLite's limit on bound parameters."""


@dataclass(frozen=True)
class IndexedMessage:
    """A stored message the index found for one of the request's hashes."""

    position: int
    """Index of the hash (the message) in the request."""
    message_id: int
    session_id: int
    chain_hash: str = ""


def record_in(cur: sqlite3.Cursor, session_id: int, message_id: int, chain_hash: str) -> None:
    """Index a stored message by its chain hash, in the caller's transaction."""
    cur.execute("INSERT OR REPLACE INTO api_messages (message_id, session_id, chain_hash,"
                " created) VALUES (?, ?, ?, ?)", (message_id, session_id, chain_hash, time.time()))


class ApiMessages:
    """Rows of ``api_messages``: message id -> the chain hash it ends."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def record(self, session_id: int, message_id: int, chain_hash: str) -> None:
        with self._db.writing() as cur:
            check_message(cur, session_id, message_id)
            record_in(cur, session_id, message_id, chain_hash)

    def of_message(self, message_id: int) -> IndexedMessage | None:
        """The indexed message ``message_id`` (position -1: in no request), if any."""
        with self._db.reading() as cur:
            row = cur.execute("SELECT session_id, chain_hash FROM api_messages"
                              " WHERE message_id = ?", (message_id,)).fetchone()
        return None if row is None else IndexedMessage(-1, message_id, row[0], row[1])

    def longest(self, hashes: Sequence[str], *, session_id: int | None = None
                ) -> IndexedMessage | None:
        """The stored message ending the longest prefix of ``hashes`` (within one
        session when given); the newest message when several hold it."""
        found: dict[str, tuple[int, int]] = {}
        where = "" if session_id is None else " AND session_id = ?"
        with self._db.reading() as cur:
            for at in range(0, len(hashes), _CHUNK):
                chunk = list(hashes[at:at + _CHUNK])
                marks = ", ".join("?" * len(chunk))
                args = [*chunk, *([] if session_id is None else [session_id])]
                for chain_hash, message_id, sid in cur.execute(
                        f"SELECT chain_hash, message_id, session_id FROM api_messages"
                        f" WHERE chain_hash IN ({marks}){where} ORDER BY message_id", args):
                    found[chain_hash] = (message_id, sid)  # the newest wins
        for position in range(len(hashes) - 1, -1, -1):
            if hashes[position] in found:
                message_id, sid = found[hashes[position]]
                return IndexedMessage(position, message_id, sid)
        return None

    def sessions_by_use(self) -> list[int]:
        """Sessions the API started or used, least recently updated first."""
        with self._db.reading() as cur:
            return [row[0] for row in cur.execute(
                "SELECT s.id FROM sessions AS s WHERE s.id IN"
                " (SELECT DISTINCT session_id FROM api_messages) ORDER BY s.updated, s.id")]
