"""Responses the HTTP API stored (OpenAI's Responses API with ``store: true``):
each an id the client holds, the reply message it ended with (where a
``previous_response_id`` follow-up continues, on that session's saved KV), the
response object as it was returned and the input items it was given. Schema
version 20 (``api_response_schema``)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from mlxchat.store.database import Database


@dataclass(frozen=True)
class StoredResponse:
    """One stored response."""

    id: str
    session_id: int
    message_id: int
    """The reply the response ended with: a follow-up continues after it."""
    body: dict[str, Any]
    """The response object as it was returned."""
    input: list[Any]
    """The input items the request gave (with the ids they were listed with)."""


class ApiResponses:
    """Rows of ``api_responses``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def add(self, response_id: str, session_id: int, message_id: int,
            body: dict[str, Any], input_items: list[Any]) -> None:
        with self._db.writing() as cur:
            cur.execute("INSERT INTO api_responses (id, session_id, message_id, created, body,"
                        " input) VALUES (?, ?, ?, ?, ?, ?)",
                        (response_id, session_id, message_id, time.time(),
                         json.dumps(body, ensure_ascii=False),
                         json.dumps(input_items, ensure_ascii=False)))

    def get(self, response_id: str) -> StoredResponse | None:
        with self._db.reading() as cur:
            row = cur.execute("SELECT id, session_id, message_id, body, input FROM"
                              " api_responses WHERE id = ?", (response_id,)).fetchone()
        if row is None:
            return None
        return StoredResponse(row[0], row[1], row[2], json.loads(row[3]), json.loads(row[4]))

    def delete(self, response_id: str) -> StoredResponse | None:
        """Remove the response; the one removed (None: there was none). Its
        session stays (``left_in``)."""
        found = self.get(response_id)
        if found is not None:
            with self._db.writing() as cur:
                cur.execute("DELETE FROM api_responses WHERE id = ?", (response_id,))
        return found

    def left_in(self, session_id: int) -> int:
        """Responses still stored in the session."""
        with self._db.reading() as cur:
            return int(cur.execute("SELECT COUNT(*) FROM api_responses WHERE session_id = ?",
                                   (session_id,)).fetchone()[0])

    def key(self) -> bytes:
        """The database's key for what the API signs."""
        with self._db.reading() as cur:
            return bytes.fromhex(cur.execute(
                "SELECT key FROM api_response_key WHERE one = 1").fetchone()[0])
