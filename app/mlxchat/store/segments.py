"""Bookkeeping of KV segment files: one row per turn's segment, keyed by the
reply that ends it. A branch's segments are those of the messages on its path;
forks and branches share rows' files, and a file is deleted only when no row
names it any more. Paths are stored relative to the data folder.

Ordering that keeps a file for every committed row: the caller writes the file
(temp, then a name no file had: ``kv_names``), then ``Segments.record`` commits
its row; files are returned for deletion only after the rows naming them are gone.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Sequence

from mlxchat.paths import kv_file
from mlxchat.store import kv_names
from mlxchat.store.database import Database
from mlxchat.store.records import SegmentRecord
from mlxchat.store.rows import PATH_UP, check_message, ids_from_blob, ids_to_blob


def _record(row: sqlite3.Row) -> SegmentRecord:
    return SegmentRecord(id=row["id"], session_id=row["session_id"],
                         message_id=row["message_id"], start=row["start_token"],
                         end=row["end_token"], path=row["path"], checksum=row["checksum"],
                         file_bytes=row["file_bytes"], kv_bits=row["kv_bits"],
                         token_ids=ids_from_blob(row["token_ids"]) or [],
                         created=row["created"], prefix_key=row["prefix_key"])


class Segments:
    """The KV segment rows of sessions' turns."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._tag: str | None = None

    def file_tag(self) -> str:
        """The word every KV file name this database makes carries (``kv_names``)."""
        if self._tag is None:
            with self._db.reading() as cur:
                self._tag = kv_names.read_tag(cur)
        return self._tag

    def record(self, session_id: int, message_id: int, *, start: int, end: int,
               path: str, checksum: str, file_bytes: int, kv_bits: int | None,
               token_ids: list[int], prefix_key: str | None = None) -> SegmentRecord:
        """Commit the row of a segment file already written (``path`` relative);
        ``prefix_key``: the stored prefix a segment starting after 0 continues."""
        with self._db.writing() as cur:
            check_message(cur, session_id, message_id)
            cur.execute(
                "INSERT INTO kv_segments (session_id, message_id, start_token, end_token, path,"
                " checksum, file_bytes, kv_bits, token_ids, created, prefix_key)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, message_id, start, end, path, checksum, file_bytes, kv_bits,
                 ids_to_blob(token_ids), time.time(), prefix_key))
            row = cur.execute("SELECT * FROM kv_segments WHERE id = ?",
                              (cur.lastrowid,)).fetchone()
        return _record(row)

    def on_branch(self, leaf_id: int | None) -> list[SegmentRecord]:
        """Segments of the messages from the root (or the branch's newest
        compaction summary, whose ledger starts anew) to ``leaf_id``, in token
        order (for a span saved twice, the newest row). A row that starts
        inside the one before it is left out: it was saved for an earlier token
        ledger of the branch (a new system prompt, say) and no longer follows."""
        if leaf_id is None:
            return []
        with self._db.reading() as cur:
            rows = cur.execute(
                PATH_UP + "SELECT s.* FROM path JOIN kv_segments AS s ON s.message_id = path.id"
                " WHERE path.depth <= (SELECT coalesce(min(p.depth), 1 << 62) FROM path AS p"
                " JOIN messages AS m ON m.id = p.id WHERE m.ledger_start AND m.role = 'summary')"
                " ORDER BY s.start_token, s.id DESC", (leaf_id,)).fetchall()
        out: list[SegmentRecord] = []
        for row in rows:
            if not out or row["start_token"] >= out[-1].end:
                out.append(_record(row))
        return out

    def session_bytes(self, session_id: int) -> int:
        """Bytes of the distinct segment files the session's rows name."""
        return self.total_bytes([session_id])

    def total_bytes(self, session_ids: Sequence[int]) -> int:
        """Bytes of the distinct segment files the rows of these sessions name
        (a file two sessions share counted once)."""
        ids = list(session_ids)
        if not ids:
            return 0
        marks = ",".join("?" * len(ids))
        with self._db.reading() as cur:
            row = cur.execute(
                "SELECT coalesce(sum(file_bytes), 0) FROM (SELECT DISTINCT path, file_bytes"
                f" FROM kv_segments WHERE session_id IN ({marks}))", ids).fetchone()
        return int(row[0])

    def shared(self, paths: Sequence[str], message_ids: Sequence[int]) -> set[str]:
        """Those of ``paths`` that a row of another message than ``message_ids``
        names (another branch's, or another session's: a fork's)."""
        ids = list(message_ids)
        marks = ",".join("?" * len(ids)) or "NULL"
        with self._db.reading() as cur:
            return {p for p in paths if cur.execute(
                f"SELECT 1 FROM kv_segments WHERE path = ? AND message_id NOT IN ({marks})"
                " LIMIT 1", (p, *ids)).fetchone()}

    def spans(self, paths: list[str]) -> dict[str, tuple[int, int]]:
        """The positions each file covers, as far as the rows naming it (in any
        session) say: (first start, last end)."""
        with self._db.reading() as cur:
            return {p: (row[0], row[1]) for p in paths if (row := cur.execute(
                "SELECT min(start_token), max(end_token) FROM kv_segments WHERE path = ?",
                (p,)).fetchone())[0] is not None}

    def unnamed(self, paths: list[str]) -> list[str]:
        """Those of ``paths`` (relative) that no row names."""
        with self._db.reading() as cur:
            return [p for p in paths if not cur.execute(
                "SELECT 1 FROM kv_segments WHERE path = ?", (p,)).fetchone()]

    def replace_files(self, old: list[tuple[str, str]], *, path: str, checksum: str,
                      file_bytes: int) -> list[Path]:
        """Point every row naming one of the ``old`` files (path, checksum), in any
        session, at ``path``, a file already written that holds all their
        positions; return the old files no row names any more."""
        with self._db.writing() as cur:
            for old_path, old_checksum in old:
                cur.execute("UPDATE kv_segments SET path = ?, checksum = ?, file_bytes = ?"
                            " WHERE path = ? AND checksum = ?",
                            (path, checksum, file_bytes, old_path, old_checksum))
            gone = [p for p, _ in old if not cur.execute(
                "SELECT 1 FROM kv_segments WHERE path = ?", (p,)).fetchone()]
        return [f for f in (kv_file(p) for p in gone) if f is not None]

    def drop(self, session_id: int) -> list[Path]:
        """Forget the session's segments; return the files no row names any more
        (only those inside this home's snapshots folder)."""
        with self._db.writing() as cur:
            return drop_rows(cur, session_id)


def copy_rows(cur: sqlite3.Cursor, mapping: dict[int, int], session_id: int) -> None:
    """Give the copies of messages (old id -> new id, in ``session_id``) the
    originals' segments: the rows are copied, the files shared."""
    for old, new in mapping.items():
        cur.execute(
            "INSERT INTO kv_segments (session_id, message_id, start_token, end_token, path,"
            " checksum, file_bytes, kv_bits, token_ids, created, prefix_key)"
            " SELECT ?, ?, start_token, end_token, path, checksum, file_bytes, kv_bits,"
            " token_ids, created, prefix_key FROM kv_segments WHERE message_id = ?",
            (session_id, new, old))


def drop_rows(cur: sqlite3.Cursor, session_id: int) -> list[Path]:
    """Delete the session's segment rows; return the files no row names any more."""
    paths = [row[0] for row in cur.execute(
        "SELECT DISTINCT path FROM kv_segments WHERE session_id = ?", (session_id,))]
    cur.execute("DELETE FROM kv_segments WHERE session_id = ?", (session_id,))
    files = (kv_file(p) for p in paths if not cur.execute(
        "SELECT 1 FROM kv_segments WHERE path = ?", (p,)).fetchone())
    return [f for f in files if f is not None]
