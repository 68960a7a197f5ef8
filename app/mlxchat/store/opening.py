"""Opening the session database file: private permissions, then ``SessionStore``."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from mlxchat import paths
from mlxchat.store.database import DEFAULT_BUSY_TIMEOUT_S
from mlxchat.store.errors import StoreError, sqlite_errors
from mlxchat.store.sessions import SessionStore
from mlxchat.store.snapshots import remove_stale_temp_files


def _make_private_file(path: Path) -> None:
    """Create the file 0600 before SQLite does (it would honour the umask); its
    -wal and -shm files take the same mode from it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        for name in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if name.exists():
                name.chmod(0o600)
    except OSError as exc:
        if path.exists() and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise StoreError(
                f"The session database {path} is read-only ({exc.strerror or exc}); "
                "mlxchat needs to write it: make it writable or set MLXCHAT_HOME elsewhere."
            ) from exc
        verb = "open" if path.exists() else "create"
        raise StoreError(
            f"Cannot {verb} the session database {path}: {exc.strerror or exc}."
        ) from exc


def open_store(
    path: Path | str | None = None, *, timeout: float = DEFAULT_BUSY_TIMEOUT_S
) -> SessionStore:
    """Open (creating and migrating as needed) the session database.

    ``path`` defaults to ``paths.database_file()``, whose folder is made 0700;
    ``":memory:"`` gives a throwaway store. ``timeout`` is how long a write waits
    for another process's lock before failing with a StoreError.
    """
    if path is None or str(path) != ":memory:":
        if path is None:
            file = paths.database_file()
            try:
                paths.ensure_private_dir(file.parent)
            except OSError as exc:
                raise StoreError(
                    f"Cannot create the data folder {file.parent}: {exc.strerror or exc}."
                ) from exc
        else:
            file = Path(path).expanduser()
            if not file.parent.exists():
                try:
                    file.parent.mkdir(parents=True, mode=0o700)
                except OSError as exc:
                    raise StoreError(
                        f"Cannot create the folder {file.parent}: {exc.strerror or exc}."
                    ) from exc
        _make_private_file(file)
        remove_stale_temp_files(paths.kv_dir())
        target = str(file)
    else:
        target = ":memory:"
    with sqlite_errors(target):
        conn = sqlite3.connect(
            target, timeout=timeout, isolation_level=None, check_same_thread=False
        )
    try:
        return SessionStore(conn, busy_timeout=timeout)
    except BaseException:
        conn.close()
        raise
