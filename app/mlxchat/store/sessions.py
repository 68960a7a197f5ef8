"""SessionStore: sessions and their message trees in one SQLite database.

Messages are never rewritten: an edit or a retry adds a message whose parent is
an earlier one, which starts a branch; the old branch stays. The only updates
are session metadata (current leaf, title, model, system prompt, settings).
Every write is one ``BEGIN IMMEDIATE`` transaction, committed before it returns.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sqlite3
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Self, Sequence

from mlxchat.chat import CalledTool, Message, Role, Session, SessionSummary
from mlxchat.generation import GenerationSettings
from mlxchat.sources import Source
from mlxchat.store import documents, pins, segments, snapshots
from mlxchat.store.api_messages import ApiMessages, record_in
from mlxchat.store.api_responses import ApiResponses
from mlxchat.store.branches import Branches
from mlxchat.store.database import Database
from mlxchat.store.drafts import Drafts
from mlxchat.store.errors import SessionNotFound, StoreError
from mlxchat.store.rows import (
    PATH_UP,
    calls_to_json,
    check_message,
    free_title,
    ids_to_blob,
    insert_message,
    insert_session,
    message_from_row,
    new_session_record,
    path_to,
    read_session,
    session_row,
    stats_dict,
    title_from,
    user_at_or_above,
)
from mlxchat.store.search import matching_sessions
from mlxchat.store.tool_grants import ToolGrants
from mlxchat.turn_stats import TurnStats


class Position(enum.Enum):
    CURRENT_LEAF = "current leaf"


CURRENT_LEAF = Position.CURRENT_LEAF
"""Default parent of ``add_message``: the session's current leaf."""


class SessionStore:
    """Sessions and their messages over one connection; the other tables are
    its collaborators, each over the same ``db``.

    ``SessionStore(conn)`` sets the connection up and migrates it (``Database``).
    It may be shared between threads when the connection was opened with
    ``check_same_thread=False``, as ``open_store`` does.
    """

    def __init__(self, conn: sqlite3.Connection, *, busy_timeout: float | None = None) -> None:
        """``busy_timeout`` (seconds) overrides the connection's; one of 0 becomes 5 s."""
        self.db = Database(conn, busy_timeout=busy_timeout)
        self.branches = Branches(self.db)
        self.segments = segments.Segments(self.db)
        self.pins = pins.Pins(self.db)
        self.prefixes = pins.Prefixes(self.db)
        self.drafts = Drafts(self.db)
        self.documents = documents.Documents(self.db)
        """Document collections for retrieval: files, chunks, BM25."""
        self.snapshots = snapshots.Snapshots(self.db)
        """Whole-cache snapshots of sessions saved before segments."""
        self.api = ApiMessages(self.db)
        self.responses = ApiResponses(self.db)
        """Responses the API stored (``store: true``), by id."""
        """Messages the HTTP API saw, by the hash of the conversation up to them."""
        self.tool_grants = ToolGrants(self.db)

    @property
    def path(self) -> str:
        """The database file; empty for an in-memory database."""
        return self.db.path

    def patience(self, seconds: float) -> AbstractContextManager[None]:
        """``Database.patience``: writes inside give up on another process's
        lock after ``seconds``."""
        return self.db.patience(seconds)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions --------------------------------------------------------------

    def create_session(
        self,
        model: str,
        system_prompt: str | None = None,
        settings: GenerationSettings | None = None,
        *,
        title: str | None = None,
    ) -> Session:
        """An empty session. A given ``title`` is locked; else the first user message sets it."""
        draft = new_session_record(title or "", model, system_prompt, settings)
        with self.db.writing() as cur:
            return read_session(cur, insert_session(cur, draft))

    def titled_session(self, title: str, model: str, system_prompt: str | None = None,
                       settings: GenerationSettings | None = None) -> tuple[Session, bool]:
        """The one session titled exactly ``title``, or a new one with that title
        (locked), in one write transaction: two processes asking at once get the
        same session. Returns (session, created)."""
        clean = title_from(title, 200)
        with self.db.writing() as cur:
            rows = cur.execute("SELECT id FROM sessions WHERE title = ? ORDER BY id",
                               (clean,)).fetchall()
            if len(rows) > 1:
                raise StoreError(f"{title!r} matches {len(rows)} sessions; give its id.")
            if rows:
                return read_session(cur, rows[0][0]), False
            draft = new_session_record(title, model, system_prompt, settings)
            return read_session(cur, insert_session(cur, draft)), True

    def get_session(self, session_id: int) -> Session:
        """The session with ``messages`` set to its current branch, root first."""
        with self.db.reading() as cur:
            return read_session(cur, session_id)

    def find_session(self, id_or_title: str, *, prefix: bool = True) -> Session:
        """By id (``12`` or ``#12``), exact title, then (with ``prefix``) the title
        case-insensitively or a unique title prefix. Several matches at the first
        level that has any is an error listing them; none is ``SessionNotFound``."""
        wanted = id_or_title.strip()
        with self.db.reading() as cur:
            number = wanted.removeprefix("#")
            if number.isdigit() and number.isascii() and len(number) < 19:
                row = cur.execute("SELECT id FROM sessions WHERE id = ?", (int(number),)).fetchone()
                if row is not None:
                    return read_session(cur, row[0])
            rows = cur.execute(
                "SELECT id, title FROM sessions ORDER BY updated DESC, id DESC"
            ).fetchall()
            key = wanted.casefold()
            levels = [[(r[0], r[1]) for r in rows if r[1] == wanted]]
            if prefix:
                levels.append([(r[0], r[1]) for r in rows if r[1].casefold() == key])
                levels.append([(r[0], r[1]) for r in rows if r[1].casefold().startswith(key)])
            for hits in levels if key else ():
                if len(hits) == 1:
                    return read_session(cur, hits[0][0])
                if len(hits) > 1:
                    shown = ", ".join(f"#{i} {t!r}" for i, t in hits[:8])
                    more = f" and {len(hits) - 8} more" if len(hits) > 8 else ""
                    raise StoreError(
                        f"{wanted!r} matches {len(hits)} sessions: {shown}{more}; give its id."
                    )
        raise SessionNotFound(f"No session matches {wanted!r}; `mlxchat sessions` lists them.")

    def most_recent_session(self) -> Session | None:
        """The session updated last, or None when there is none."""
        with self.db.reading() as cur:
            row = cur.execute(
                "SELECT id FROM sessions ORDER BY updated DESC, id DESC LIMIT 1"
            ).fetchone()
            return None if row is None else read_session(cur, row[0])

    def list_sessions(
        self, limit: int | None = 50, search: str | None = None
    ) -> list[SessionSummary]:
        """Newest first; with ``search``, only matching sessions, best match first, with a snippet.

        ``message_count`` counts the current branch. Any search text is safe.
        """
        if limit is not None and limit < 0:
            limit = None
        with self.db.reading() as cur:
            snippets: dict[int, str] = {}
            if search is not None and search.strip():
                snippets = matching_sessions(cur.connection, search)
                ids = list(snippets)[:limit]
            else:
                sql = "SELECT id FROM sessions ORDER BY updated DESC, id DESC LIMIT ?"
                ids = [r[0] for r in cur.execute(sql, (-1 if limit is None else limit,))]
            out = []
            for session_id in ids:
                row = session_row(cur, session_id)
                snap = cur.execute(
                    "SELECT coalesce((SELECT file_bytes FROM snapshots WHERE session_id = ?"
                    " ORDER BY id DESC LIMIT 1), 0) + (SELECT coalesce(sum(file_bytes), 0)"
                    " FROM (SELECT DISTINCT path, file_bytes FROM kv_segments"
                    " WHERE session_id = ?))",
                    (session_id, session_id),
                ).fetchone()
                count = 0
                if row["leaf_id"] is not None:
                    count = cur.execute(
                        PATH_UP + "SELECT count(*) FROM path", (row["leaf_id"],)
                    ).fetchone()[0]
                out.append(
                    SessionSummary(
                        id=session_id,
                        title=row["title"],
                        model=row["model"],
                        created=row["created"],
                        updated=row["updated"],
                        message_count=count,
                        snapshot_bytes=snap[0] if snap else 0,
                        snippet=snippets.get(session_id, ""),
                        pins=cur.execute("SELECT count(*) FROM session_pins WHERE session_id = ?",
                                         (session_id,)).fetchone()[0],
                        from_api=cur.execute("SELECT EXISTS (SELECT 1 FROM api_messages"
                                             " WHERE session_id = ?)", (session_id,)
                                             ).fetchone()[0] == 1,
                    )
                )
            return out

    def rename_session(self, session_id: int, title: str) -> Session:
        """Set the title and lock it: it no longer follows the first message."""
        clean = title_from(title, 200)
        if not clean:
            raise StoreError("A session title cannot be empty.")
        with self.db.writing() as cur:
            session_row(cur, session_id)
            cur.execute(
                "UPDATE sessions SET title = ?, title_locked = 1, updated = ? WHERE id = ?",
                (clean, time.time(), session_id),
            )
            return read_session(cur, session_id)

    def _update(self, session_id: int, column: str, value: Any) -> Session:
        # ``column`` is always one of our literals, never user text.
        assert column in {"model", "system_prompt", "settings"}
        with self.db.writing() as cur:
            session_row(cur, session_id)
            cur.execute(
                f"UPDATE sessions SET {column} = ?, updated = ? WHERE id = ?",
                (value, time.time(), session_id),
            )
            return read_session(cur, session_id)

    def update_model(self, session_id: int, model: str) -> Session:
        """Change the session's model spec."""
        return self._update(session_id, "model", model)

    def update_system_prompt(self, session_id: int, system_prompt: str | None) -> Session:
        """Change (or clear, with None) the session's system prompt."""
        return self._update(session_id, "system_prompt", system_prompt)

    def update_session_settings(self, session_id: int, settings: GenerationSettings) -> Session:
        """Replace the session's generation settings."""
        return self._update(session_id, "settings", json.dumps(settings.to_dict()))

    def delete_session(self, session_id: int) -> list[Path]:
        """Delete the session, its messages, snapshot and segment rows; return the
        files to delete (segment files other sessions still share are kept)."""
        with self.db.writing() as cur:
            session_row(cur, session_id)
            files = snapshots.drop_rows(cur, session_id) + segments.drop_rows(cur, session_id)
            cur.execute("UPDATE sessions SET leaf_id = NULL WHERE id = ?", (session_id,))
            cur.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            cur.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            documents.drop_collection(cur, documents.recall_collection(session_id))
            files += pins.drop_unused_prefixes(cur)
        return files

    # -- messages --------------------------------------------------------------

    def add_message(
        self,
        session_id: int,
        role: Role,
        content: str,
        parent_id: int | None | Position = CURRENT_LEAF,
        *,
        token_count: int | None = None,
        stats: TurnStats | None = None,
        cancelled: bool = False,
        token_ids: list[int] | None = None,
        ledger_key: str | None = None,
        ledger_start: bool = False,
        reasoning: str | None = None,
        sources: list[Source] | None = None,
        tool_calls: tuple[CalledTool, ...] = (),
        tool_call_id: str | None = None,
        tool_name: str | None = None,
    ) -> Message:
        """Store a message after ``parent_id`` (default: the current leaf; None: a new root),
        make it the current leaf and commit, all in one call.

        A user message that is the first of its branch names an unlocked session.
        """
        draft = Message(
            role=role, content=content, token_count=token_count, stats=stats, cancelled=cancelled,
            token_ids=token_ids, ledger_key=ledger_key, ledger_start=ledger_start,
            reasoning=reasoning, sources=sources, tool_calls=tuple(tool_calls),
            tool_call_id=tool_call_id, tool_name=tool_name,
        )
        with self.db.writing() as cur:
            return _add(cur, session_id, parent_id, draft)

    def add_messages(self, session_id: int, messages: list[Message], *,
                     api_hashes: Sequence[str] = ()) -> list[Message]:
        """Store ``messages`` one after another from the current leaf, all or
        none (one transaction: several tool results that share one ledger entry;
        a request's history, each indexed by its ``api_hashes`` entry)."""
        with self.db.writing() as cur:
            stored = [_add(cur, session_id, CURRENT_LEAF, dataclasses.replace(m))
                      for m in messages]
            for message, chain_hash in zip(stored, api_hashes):
                assert message.id is not None
                record_in(cur, session_id, message.id, chain_hash)
            return stored

    def set_message_ledger(self, message_id: int, token_ids: list[int], key: str, *,
                           start: bool) -> None:
        """Record the token ids a stored message adds (an older message that now
        starts a token ledger)."""
        with self.db.writing() as cur:
            cur.execute(
                "UPDATE messages SET token_ids = ?, ledger_key = ?, ledger_start = ? WHERE id = ?",
                (ids_to_blob(token_ids), key, int(start), message_id),
            )

    def set_reply_calls(self, message_id: int, content: str,
                        calls: tuple[CalledTool, ...]) -> None:
        """A stored reply read apart: its text around the calls, and the calls."""
        with self.db.writing() as cur:
            cur.execute("UPDATE messages SET content = ?, tool_calls = ? WHERE id = ?",
                        (content, calls_to_json(calls), message_id))

    def mark_stopped(self, message_id: int, *, token_ids: list[int] | None) -> None:
        """A reply the engine was stopped for at a stop string: finished (its
        finish reason 'stop'), not cancelled, with the ids of its text up to the
        stop (None: none kept, the next turn renders it)."""
        with self.db.writing() as cur:
            row = cur.execute("SELECT stats FROM messages WHERE id = ?", (message_id,)).fetchone()
            stats = stats_dict(row[0] if row else None)
            stats["finish_reason"] = "stop"
            cur.execute("UPDATE messages SET cancelled = 0, stats = ?, token_ids = ? WHERE id = ?",
                        (json.dumps(stats), ids_to_blob(token_ids), message_id))

    def set_message_stats(self, message_id: int, stats: TurnStats) -> None:
        """Replace a stored reply's figures (what happened after it was stored,
        such as its KV segment failing to save, is said there too)."""
        with self.db.writing() as cur:
            cur.execute("UPDATE messages SET stats = ? WHERE id = ?",
                        (json.dumps(stats.to_dict()), message_id))

    def branch_path(self, leaf_id: int) -> list[Message]:
        """The messages from the root down to ``leaf_id``, root first."""
        with self.db.reading() as cur:
            path = path_to(cur, leaf_id)
        if not path:
            raise StoreError(f"There is no message {leaf_id}.")
        return path

    def all_messages(self, session_id: int) -> list[Message]:
        """Every message of the session, on every branch, in the order stored."""
        with self.db.reading() as cur:
            session_row(cur, session_id)
            rows = cur.execute(
                "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (session_id,)
            )
            return [message_from_row(row) for row in rows]


def _add(cur: sqlite3.Cursor, session_id: int, parent_id: int | None | Position,
         draft: Message) -> Message:
    """``draft`` stored after ``parent_id`` and made the current leaf."""
    row = session_row(cur, session_id)
    parent = row["leaf_id"] if parent_id is CURRENT_LEAF else parent_id
    assert not isinstance(parent, Position)
    if parent is not None:
        check_message(cur, session_id, parent)
    draft.parent_id = parent
    draft.created = time.time()
    draft.id = insert_message(cur, session_id, parent, draft)
    if draft.role == "assistant":
        cur.execute("DELETE FROM drafts WHERE session_id = ?", (session_id,))
    cur.execute("UPDATE sessions SET leaf_id = ?, updated = ? WHERE id = ?",
                (draft.id, draft.created, session_id))
    if draft.role == "user" and not row["title_locked"] and title_from(draft.content):
        if parent is None or not user_at_or_above(cur, parent):
            cur.execute("UPDATE sessions SET title = ? WHERE id = ?",
                        (free_title(cur, title_from(draft.content), session_id), session_id))
    return draft
