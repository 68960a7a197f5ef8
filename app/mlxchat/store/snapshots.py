"""Bookkeeping of whole-cache KV snapshot files: the rows, never the files themselves.

Nothing records new snapshots any more (KV segments replaced them); the rows
that sessions saved before segments left are read (``Snapshots.latest``) so
those sessions resume, and dropped once done with (``Snapshots.drop``, which
hands back the files for the caller to delete after the rows are gone).
``Snapshots.referenced_paths`` lets a cleanup find orphan files.

Rows hold the file's path relative to the data folder ('snapshots/NAME'), so a
moved or copied home uses its own files. A row is only ever resolved inside
this home's snapshots folder: one that leads elsewhere (an absolute path, '..',
a link out) is treated as missing, never read, never handed back for deletion.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from mlxchat import paths
from mlxchat.store.database import Database
from mlxchat.store.records import SnapshotRecord


class Snapshots:
    """The whole-cache snapshot rows of sessions saved before segments."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def latest(self, session_id: int) -> SnapshotRecord | None:
        """The newest snapshot row of the session, or None (also when its path
        leads outside the snapshots folder)."""
        with self._db.reading() as cur:
            row = cur.execute(
                "SELECT * FROM snapshots WHERE session_id = ? ORDER BY id DESC LIMIT 1",
                (session_id,),
            ).fetchone()
        file = None if row is None else paths.kv_file(row["path"])
        if row is None or file is None:
            return None
        return SnapshotRecord(
            id=row["id"],
            session_id=row["session_id"],
            leaf_id=row["leaf_id"],
            path=file,
            sha256=row["sha256"],
            token_count=row["token_count"],
            file_bytes=row["file_bytes"],
            mlx_lm_version=row["mlx_lm_version"],
            kv_bits=row["kv_bits"],
            created=row["created"],
        )

    def drop(self, session_id: int) -> list[Path]:
        """Forget every snapshot of the session; return the files for the caller to delete."""
        with self._db.writing() as cur:
            return drop_rows(cur, session_id)

    def referenced_paths(self) -> set[Path]:
        """Every file a snapshot row points to; other files in the snapshots folder are orphans."""
        with self._db.reading() as cur:
            rows = [row[0] for row in cur.execute("SELECT path FROM snapshots")]
        return {file for file in map(paths.kv_file, rows) if file is not None}


def drop_rows(cur: sqlite3.Cursor, session_id: int) -> list[Path]:
    """Delete the session's snapshot rows; return the files no row names any more."""
    rows = cur.execute("SELECT path FROM snapshots WHERE session_id = ?", (session_id,))
    recorded = list(dict.fromkeys(row[0] for row in rows))
    cur.execute("DELETE FROM snapshots WHERE session_id = ?", (session_id,))
    # A file another session's row still names (a fork's, say) is not obsolete.
    still_used = {
        p
        for p in recorded
        if cur.execute("SELECT 1 FROM snapshots WHERE path = ?", (p,)).fetchone()
    }
    files = (paths.kv_file(p) for p in recorded if p not in still_used)
    return [file for file in files if file is not None]


STALE_TEMP_S = 10 * 60
"""A temp snapshot file this old is left over even if its PID is alive (reused)."""


def remove_stale_temp_files(folder: Path, *, now: float | None = None) -> list[Path]:
    """Delete the temp files of snapshot writes that were killed: those whose
    writer is no longer running, or older than STALE_TEMP_S. Returns them."""
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    for entry in entries:
        found = paths.KV_TEMP.match(entry.name)
        if found is None:
            continue
        try:
            info = entry.lstat()
            if _running(int(found.group(1))) and now - info.st_mtime < STALE_TEMP_S:
                continue
            entry.unlink()
        except OSError:
            continue
        removed.append(entry)
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # another user's process
    except (ProcessLookupError, OverflowError):
        return False
    return True
