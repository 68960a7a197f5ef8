"""Bookkeeping of pinned documents and of the KV prefixes they share.

A session's pins are rows in order; each names the prefix key of the
session's whole system part. A prefix is one file in the snapshots folder,
content-addressed by its key; its row keeps the checksum and token ids to
check it before use. A prefix no pin names any more is dropped in the same
transaction that dropped the last pin, and its file returned for deletion.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mlxchat.chat import Pin, Session
from mlxchat.paths import kv_file
from mlxchat.store.database import Database
from mlxchat.store.pin_rows import write_pins
from mlxchat.store.rows import ids_from_blob, ids_to_blob, read_session, session_row


@dataclass(frozen=True)
class PrefixRecord:
    """A stored KV prefix: the positions ``[0, len(token_ids))`` of a system part."""

    key: str
    path: str
    """Relative to the data folder."""
    checksum: str
    token_ids: list[int]
    file_bytes: int
    kv_bits: int | None

    def file(self) -> Path | None:
        """The prefix's file, when it is on disk."""
        file = kv_file(self.path)
        return file if file is not None and file.is_file() else None


@dataclass(frozen=True)
class PinUse:
    """A session that pins a document (found by the document's text)."""

    session_id: int
    title: str


class Pins:
    """The pinned documents of sessions."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def replace(self, session_id: int, pins: Sequence[Pin]) -> tuple[Session, list[Path]]:
        """Replace the session's pins; returns it as stored, and the prefix files
        no session uses any more."""
        with self._db.writing() as cur:
            session_row(cur, session_id)
            write_pins(cur, session_id, pins)
            cur.execute("UPDATE sessions SET updated = ? WHERE id = ?", (time.time(), session_id))
            files = drop_unused_prefixes(cur)
            return read_session(cur, session_id), files

    def sessions_pinning(self, text_hash: str) -> list[PinUse]:
        with self._db.reading() as cur:
            rows = cur.execute(
                "SELECT DISTINCT s.id, s.title FROM session_pins AS p JOIN sessions AS s"
                " ON s.id = p.session_id WHERE p.text_hash = ? ORDER BY s.id",
                (text_hash,)).fetchall()
        return [PinUse(r[0], r[1]) for r in rows]


class Prefixes:
    """The content-addressed KV prefixes that pinned sessions share."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, key: str) -> PrefixRecord | None:
        with self._db.reading() as cur:
            row = cur.execute("SELECT * FROM kv_prefixes WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return PrefixRecord(row["key"], row["path"], row["checksum"],
                            ids_from_blob(row["token_ids"]) or [], row["file_bytes"],
                            row["kv_bits"])

    def record(self, record: PrefixRecord) -> list[Path]:
        """Commit the row of a prefix file already written. A prefix no session
        pins (any more) is not kept: its file is returned for deletion, as is
        the file of the row it replaces (one rewritten under a fresh name)."""
        with self._db.writing() as cur:
            before = cur.execute("SELECT path FROM kv_prefixes WHERE key = ?",
                                 (record.key,)).fetchone()
            cur.execute(
                "INSERT OR REPLACE INTO kv_prefixes (key, path, checksum, token_ids, file_bytes,"
                " kv_bits, created) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (record.key, record.path, record.checksum, ids_to_blob(record.token_ids),
                 record.file_bytes, record.kv_bits, time.time()))
            replaced = [before[0]] if before and before[0] != record.path and not cur.execute(
                "SELECT 1 FROM kv_prefixes WHERE path = ?", (before[0],)).fetchone() else []
            return drop_unused_prefixes(cur) + [f for f in map(kv_file, replaced) if f]


def drop_unused_prefixes(cur: sqlite3.Cursor) -> list[Path]:
    """Delete the prefix rows no pin names; return their files."""
    rows = cur.execute(
        "SELECT key, path FROM kv_prefixes WHERE key NOT IN"
        " (SELECT prefix_key FROM session_pins WHERE prefix_key IS NOT NULL)").fetchall()
    cur.executemany("DELETE FROM kv_prefixes WHERE key = ?", [(r[0],) for r in rows])
    files = (kv_file(r[1]) for r in rows)
    return [f for f in files if f is not None]
