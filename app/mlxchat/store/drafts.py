"""Reply drafts: a streaming reply checkpointed so that a crash never loses it.

While a reply streams, the caller saves its text every second or so; when the
reply finishes, ``add_message`` of the assistant message removes the draft in
the same transaction. A draft still there on the next open is a reply whose
process died: ``Drafts.recover`` stores it as a stopped assistant message.
"""

from __future__ import annotations

import time

from mlxchat.chat import Message
from mlxchat.store.database import Database
from mlxchat.store.rows import insert_message, session_row


class Drafts:
    """The reply each session is generating, if any."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def save(self, session_id: int, parent_id: int | None, content: str,
             reasoning: str | None = None) -> None:
        """Checkpoint the reply being generated after ``parent_id`` (its answer
        so far, and its reasoning)."""
        with self._db.writing() as cur:
            session_row(cur, session_id)
            cur.execute(
                "INSERT INTO drafts (session_id, parent_id, content, updated, reasoning)"
                " VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (session_id) DO UPDATE SET parent_id = excluded.parent_id,"
                " content = excluded.content, updated = excluded.updated,"
                " reasoning = excluded.reasoning",
                (session_id, parent_id, content, time.time(), reasoning or None),
            )

    def left(self) -> list[int]:
        """The sessions that have a draft (a reply whose process died, or one
        streaming now in another process)."""
        with self._db.reading() as cur:
            return [row[0] for row in cur.execute(
                "SELECT session_id FROM drafts ORDER BY session_id")]

    def discard(self, session_id: int) -> None:
        with self._db.writing() as cur:
            cur.execute("DELETE FROM drafts WHERE session_id = ?", (session_id,))

    def recover(self, session_id: int) -> Message | None:
        """Turn a leftover draft into a stopped assistant message (and the leaf,
        if the leaf is still its parent); None when there is no draft."""
        with self._db.writing() as cur:
            row = session_row(cur, session_id)
            draft = cur.execute("SELECT * FROM drafts WHERE session_id = ?", (session_id,)).fetchone()
            if draft is None:
                return None
            cur.execute("DELETE FROM drafts WHERE session_id = ?", (session_id,))
            if not draft["content"] and not draft["reasoning"]:
                return None
            message = Message(role="assistant", content=draft["content"], parent_id=draft["parent_id"],
                              cancelled=True, created=draft["updated"],
                              reasoning=draft["reasoning"])
            message.id = insert_message(cur, session_id, draft["parent_id"], message)
            if row["leaf_id"] == draft["parent_id"]:
                cur.execute("UPDATE sessions SET leaf_id = ? WHERE id = ?", (message.id, session_id))
            return message
