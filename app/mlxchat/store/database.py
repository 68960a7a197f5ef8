"""The session database's connection and its transactions, which every table of
the store goes through."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from mlxchat.store.errors import sqlite_errors
from mlxchat.store.schema import migrate

DEFAULT_BUSY_TIMEOUT_S = 5.0


class Database:
    """One SQLite connection, set up and migrated, and its transactions.

    ``Database(conn)`` puts the connection in autocommit mode (transactions are
    run here), turns on WAL, foreign keys and a busy timeout, and migrates the
    schema. It may be shared between threads when the connection was opened
    with ``check_same_thread=False``, as ``open_store`` does.
    """

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

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Cursor]:
        """One read transaction, so that several statements see the same snapshot."""
        with self._transaction("BEGIN") as cursor:
            yield cursor

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Cursor]:
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
