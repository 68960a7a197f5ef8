"""One writer per session: an advisory lock file per open session.

``flock`` locks belong to the open file, so the system releases them when the
process dies however it dies: a lock is never stale. The file names the
owner's pid so the refusal can say who holds it.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from mlxchat import paths
from mlxchat.errors import MlxchatError


class SessionBusy(MlxchatError):
    """The session is open in another mlxchat process."""


def lock_file(database: str, session_id: int) -> Path:
    """Next to the database, so two databases never share a session's lock."""
    db = Path(database)
    return db.parent / "locks" / f"{db.name}-session-{session_id}.lock"


class SessionLock:
    """Held while a session is open for writing; ``release`` is idempotent."""

    def __init__(self, database: str, session_id: int, *, wait_s: float = 0.0,
                 title: str = ""):
        self.session_id = session_id
        path = lock_file(database, session_id)
        paths.ensure_private_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
                    os.close(fd)
                    name = f" “{title}”" if title else ""
                    raise SessionBusy(
                        f"Session #{session_id}{name} is open in another mlxchat (pid {owner}); "
                        "close it there or try again.") from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the file drops the lock
