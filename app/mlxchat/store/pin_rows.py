"""Rows of pinned documents: read with a session, written with a new one (a
fork keeps its source's pins). Kept out of ``pins.py``, which builds on
``rows.py``, so that ``rows.py`` can read them without an import cycle."""

from __future__ import annotations

import sqlite3
import time
from typing import Sequence

from mlxchat.chat import Pin


def read_pins(cur: sqlite3.Cursor, session_id: int) -> list[Pin]:
    rows = cur.execute(
        "SELECT name, path, text, token_count, prefix_key FROM session_pins"
        " WHERE session_id = ? ORDER BY position", (session_id,)).fetchall()
    return [Pin(name=r[0], path=r[1], text=r[2], tokens=r[3], prefix_key=r[4]) for r in rows]


def write_pins(cur: sqlite3.Cursor, session_id: int, pins: Sequence[Pin]) -> None:
    """Replace the session's pins with ``pins``, in order."""
    cur.execute("DELETE FROM session_pins WHERE session_id = ?", (session_id,))
    now = time.time()
    for position, pin in enumerate(pins):
        cur.execute(
            "INSERT INTO session_pins (session_id, position, name, path, text, text_hash,"
            " token_count, prefix_key, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, position, pin.name, pin.path, pin.text, pin.text_hash, pin.tokens,
             pin.prefix_key, now))
