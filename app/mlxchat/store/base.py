"""The connection, transactions and row mapping that every part of SessionStore shares."""

from __future__ import annotations

import enum
import sys
from array import array
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self

from mlxchat.chat import (GENERATION_RULES, GenerationSettings, Message, Session, TurnStats,
                          generation_problem, typed_text)
from mlxchat.store.errors import StoreError, sqlite_errors
from mlxchat.store.pin_rows import read_pins, write_pins
from mlxchat.store.schema import migrate

ROLES: tuple[str, ...] = ("system", "user", "assistant")
DEFAULT_TITLE = "New chat"
TITLE_LENGTH = 60
DEFAULT_BUSY_TIMEOUT_S = 5.0


class Position(enum.Enum):
    CURRENT_LEAF = "current leaf"


CURRENT_LEAF = Position.CURRENT_LEAF
"""Default parent of ``add_message``: the session's current leaf."""


def title_from(text: str, limit: int = TITLE_LENGTH) -> str:
    """First non-blank line of ``text`` (attached files skipped: ``chat.typed_text``),
    whitespace collapsed, cut at a word to ``limit``."""
    text = typed_text(text).encode("utf-8", "replace").decode("utf-8")
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = " ".join("".join(ch if ch.isprintable() else " " for ch in line).split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" .,;:-") + "…"


def message_from_row(row: sqlite3.Row) -> Message:
    stats = None
    if row["stats"]:
        try:
            stats = TurnStats.from_dict(json.loads(row["stats"]))
        except (ValueError, TypeError):
            stats = None
    return Message(
        role=row["role"],
        content=row["content"],
        id=row["id"],
        parent_id=row["parent_id"],
        token_count=row["token_count"],
        stats=stats,
        cancelled=bool(row["cancelled"]),
        created=row["created"],
        token_ids=ids_from_blob(row["token_ids"]),
        ledger_key=row["ledger_key"],
        ledger_start=bool(row["ledger_start"]),
        reasoning=row["reasoning"],
    )


def ids_to_blob(ids: list[int] | None) -> bytes | None:
    """Token ids as little-endian int32 (4 bytes a token)."""
    if ids is None:
        return None
    arr = array("i", ids)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def ids_from_blob(blob: bytes | None) -> list[int] | None:
    if blob is None or len(blob) % 4:
        return None
    arr = array("i")
    arr.frombytes(blob)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tolist()


def settings_from_json(text: str | None) -> GenerationSettings:
    """Stored settings; a value the rule table refuses (an import from before it
    was checked, a hand edit) falls back to its default, so the session stays usable."""
    try:
        settings = GenerationSettings.from_dict(json.loads(text or "{}"))
    except (ValueError, TypeError):
        return GenerationSettings()
    default = GenerationSettings()
    for name in GENERATION_RULES:
        if generation_problem(name, getattr(settings, name)):
            setattr(settings, name, getattr(default, name))
    return settings


PATH_UP = """
    WITH RECURSIVE path(id, depth) AS (
        SELECT id, 0 FROM messages WHERE id = ?
        UNION ALL
        SELECT m.parent_id, path.depth + 1 FROM messages AS m JOIN path ON m.id = path.id
        WHERE m.parent_id IS NOT NULL
    )
"""


class StoreBase:
    """Connection setup, transactions and row mapping; ``SessionStore`` is the public class."""

    def __init__(self, conn: sqlite3.Connection, *, busy_timeout: float | None = None) -> None:
        """``busy_timeout`` (seconds) overrides the connection's; one of 0 becomes 5 s."""
        self._conn = conn
        self._lock = threading.RLock()
        self.path = ""
        """The database file; empty for an in-memory database."""
        with sqlite_errors():
            conn.isolation_level = None
            self.path = next(
                (row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), ""
            )
        with sqlite_errors(self.path):
            conn.execute("PRAGMA foreign_keys = ON")
            if busy_timeout is not None:
                conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            elif conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0:
                conn.execute(f"PRAGMA busy_timeout = {int(DEFAULT_BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")  # stays 'memory' for :memory:
            conn.execute("PRAGMA synchronous = FULL")
        migrate(conn, self.path)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions ----------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Cursor]:
        """One read transaction, so that several statements see the same snapshot."""
        with self._transaction("BEGIN") as cursor:
            yield cursor

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction: committed on success, rolled back on any error."""
        with self._transaction("BEGIN IMMEDIATE") as cursor:
            yield cursor

    @contextmanager
    def patience(self, seconds: float) -> Iterator[None]:
        """Writes inside wait at most ``seconds`` for another process's lock
        (instead of the store's busy timeout), then fail with StoreLocked."""
        with self._lock:
            before = self._conn.execute("PRAGMA busy_timeout").fetchone()[0]
            self._conn.execute(f"PRAGMA busy_timeout = {max(0, int(seconds * 1000))}")
            try:
                yield
            finally:
                self._conn.execute(f"PRAGMA busy_timeout = {int(before)}")

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Cursor]:
        with self._lock, sqlite_errors(self.path):
            cursor = self._conn.cursor()
            cursor.row_factory = sqlite3.Row
            cursor.execute(begin)
            try:
                yield cursor
                cursor.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    try:
                        self._conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise

    def _session_row(self, cur: sqlite3.Cursor, session_id: int) -> sqlite3.Row:
        row: sqlite3.Row | None = cur.execute(
            "SELECT * FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise StoreError(f"There is no session #{session_id}.")
        return row

    def _check_message(self, cur: sqlite3.Cursor, session_id: int, message_id: int) -> None:
        row = cur.execute("SELECT session_id FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None or row[0] != session_id:
            raise StoreError(f"Message {message_id} is not part of session #{session_id}.")

    def _path(self, cur: sqlite3.Cursor, leaf_id: int | None) -> list[Message]:
        if leaf_id is None:
            return []
        sql = (
            PATH_UP + "SELECT m.* FROM path JOIN messages AS m USING (id) ORDER BY path.depth DESC"
        )
        return [message_from_row(row) for row in cur.execute(sql, (leaf_id,))]

    def _session(self, cur: sqlite3.Cursor, session_id: int) -> Session:
        row = self._session_row(cur, session_id)
        return Session(
            id=row["id"],
            title=row["title"],
            model=row["model"],
            system_prompt=row["system_prompt"],
            settings=settings_from_json(row["settings"]),
            messages=self._path(cur, row["leaf_id"]),
            leaf_id=row["leaf_id"],
            created=row["created"],
            updated=row["updated"],
            title_locked=bool(row["title_locked"]),
            pins=read_pins(cur, session_id),
        )

    def _insert_message(
        self, cur: sqlite3.Cursor, session_id: int, parent_id: int | None, message: Message
    ) -> int:
        if message.role not in ROLES:
            raise StoreError(
                f"Unknown message role {message.role!r}; expected one of {', '.join(ROLES)}."
            )
        stats = json.dumps(message.stats.to_dict()) if message.stats is not None else None
        cur.execute(
            "INSERT INTO messages (session_id, parent_id, role, content, token_count, stats,"
            " cancelled, created, token_ids, ledger_key, ledger_start, reasoning)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session_id,
                parent_id,
                message.role,
                message.content,
                message.token_count,
                stats,
                int(message.cancelled),
                message.created if message.created is not None else time.time(),
                ids_to_blob(message.token_ids),
                message.ledger_key,
                int(message.ledger_start),
                message.reasoning or None,
            ),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def _new_session(self, cur: sqlite3.Cursor, session: Session) -> int:
        now = time.time()
        cur.execute(
            "INSERT INTO sessions (title, title_locked, model, system_prompt, settings, created,"
            " updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                title_from(session.title, 200) or DEFAULT_TITLE,
                int(session.title_locked),
                session.model,
                session.system_prompt,
                json.dumps(session.settings.to_dict()),
                session.created if session.created is not None else now,
                session.updated if session.updated is not None else now,
            ),
        )
        session_id = cur.lastrowid
        assert session_id is not None
        write_pins(cur, session_id, session.pins)  # a fork pins what its source did
        return session_id

    def _update(self, session_id: int, column: str, value: Any) -> Session:
        # ``column`` is always one of our literals, never user text.
        assert column in {"model", "system_prompt", "settings"}
        with self._writing() as cur:
            self._session_row(cur, session_id)
            cur.execute(
                f"UPDATE sessions SET {column} = ?, updated = ? WHERE id = ?",
                (value, time.time(), session_id),
            )
            return self._session(cur, session_id)
