"""A database built by the migrations up to an older schema version, for the
tests of a migration: they fill it as that version's mlxchat would, then open it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mlxchat.store.schema import MIGRATIONS


def database_at(path: Path, version: int) -> sqlite3.Connection:
    """An autocommit connection to a new database at ``version``."""
    conn = sqlite3.connect(path, isolation_level=None)
    for statements in MIGRATIONS[:version]:
        for statement in statements:
            statement(conn) if callable(statement) else conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {version}")
    return conn
