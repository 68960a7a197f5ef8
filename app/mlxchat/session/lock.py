"""One writer per session: an advisory lock file per open session.

``flock`` locks belong to the open file, so the system releases them when the
process dies however it dies: a lock is never stale. The file names the
owner's pid (and which part of it holds the lock: the chat, the API server)
so the refusal can say who holds it; two parts of one process exclude each
other too (each opens the file itself).
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from mlxchat import paths
from mlxchat.chat import Session
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
                 title: str = "", holder: str = ""):
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
                    owner = os.pread(fd, 96, 0).decode("utf-8", "replace").strip()
                    os.close(fd)
                    name = f"Session #{session_id}" + (f" “{title}”" if title else "")
                    raise SessionBusy(_busy_words(name, owner)) from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {holder}".strip().encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the file drops the lock


def _busy_words(name: str, owner: str) -> str:
    """The refusal, from what the lock file says: 'PID [HOLDER]'."""
    pid, _, holder = owner.partition(" ")
    if pid == str(os.getpid()):
        return (f"{name} is in use by {holder or 'another part'} of this mlxchat; "
                "try again when it is done with it.")
    return f"{name} is open in another mlxchat (pid {pid or '?'}); close it there or try again."


class SessionLocks:
    """The lock of the session a conversation has open (none for a throwaway
    in-memory store: no other process can see its sessions)."""

    def __init__(self, database: str | None, *, wait_s: float = 0.0, holder: str = ""):
        self._database = database
        self._wait_s = wait_s
        self._holder = holder
        """Who in this process holds them ('the API server'), for the refusal."""
        self._lock: SessionLock | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def _take(self, session: Session) -> SessionLock | None:
        if not self._database or session.id is None:
            return None
        return SessionLock(self._database, session.id, wait_s=self._wait_s, title=session.title,
                           holder=self._holder)

    def hold(self, session: Session) -> None:
        """Take ``session``'s lock (SessionBusy when another process has it)."""
        self._lock = self._take(session)

    def probe(self, session: Session) -> None:
        """SessionBusy when another holder has ``session`` now (a check before
        writing to it; the lock is let go at once)."""
        if self._lock is None or self._lock.session_id != session.id:
            lock = self._take(session)
            if lock is not None:
                lock.release()

    def switch(self, session: Session) -> None:
        """Hold ``session``'s lock instead of the current one (SessionBusy changes nothing)."""
        new = self._take(session)
        self.release()
        self._lock = new

    @contextmanager
    def switching(self, session: Session) -> Iterator[None]:
        """Hold ``session``'s lock while the block prepares it; if the block
        fails, the lock held before is kept and the new one let go."""
        previous = self._lock
        same = previous is not None and previous.session_id == session.id
        new = previous if same else self._take(session)
        self._lock = new
        try:
            yield
        except BaseException:
            if new is not previous and new is not None:
                new.release()
            self._lock = previous
            raise
        if previous is not None and previous is not new:
            previous.release()

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()
