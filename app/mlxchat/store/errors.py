"""The one exception the store raises, and the translation of sqlite3 errors into it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from mlxchat.errors import MlxchatError


class StoreError(MlxchatError):
    """A session-store failure, with a one-line message fit to show the user."""


class SessionNotFound(StoreError):
    """No session has that id or title."""


class StoreLocked(StoreError):
    """Another process holds the database's write lock; trying again later works."""


def _where(path: str) -> str:
    return f" ({path})" if path else ""


def translate(exc: Exception, path: str = "") -> StoreError:
    """Turn a sqlite3 error (or a value sqlite3 cannot bind) into a one-line StoreError."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, UnicodeEncodeError):
        return StoreError(
            "The text holds characters that are not valid Unicode; nothing was saved."
        )
    if isinstance(exc, OverflowError):
        return StoreError("A number is too large to store (over 64 bits); nothing was saved.")
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = " ".join(str(exc).split())
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in text:
        return StoreLocked(
            f"The session database{_where(path)} is locked by another process "
            "(is another mlxchat saving?); close it or try again in a moment."
        )
    if primary in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT) or "not a database" in text:
        return StoreError(
            f"The session database{_where(path)} is damaged or not a SQLite file ({text}); "
            "move it aside and mlxchat will start a new one."
        )
    if primary == sqlite3.SQLITE_FULL:
        return StoreError(
            f"The disk is full; the session database{_where(path)} could not be written."
        )
    if primary in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
        return StoreError(
            f"The session database{_where(path)} cannot be opened for writing ({text})."
        )
    return StoreError(f"Session database error{_where(path)}: {text}")


@contextmanager
def sqlite_errors(path: str = "") -> Iterator[None]:
    """Re-raise any sqlite3 error inside the block as a StoreError."""
    try:
        yield
    except (sqlite3.Error, UnicodeEncodeError, OverflowError) as exc:
        raise translate(exc, path) from exc
