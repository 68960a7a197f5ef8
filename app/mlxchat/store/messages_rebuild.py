"""Migration steps that rebuild the messages table (SQLite cannot alter a
CHECK in place)."""

from __future__ import annotations

import sqlite3

from mlxchat.store.errors import StoreError

_MESSAGES_WITH_TOOLS = """
    CREATE TABLE messages_rebuilt (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
        content TEXT NOT NULL,
        token_count INTEGER,
        stats TEXT,
        created REAL NOT NULL,
        cancelled INTEGER NOT NULL DEFAULT 0,
        token_ids BLOB,
        ledger_key TEXT,
        ledger_start INTEGER NOT NULL DEFAULT 0,
        reasoning TEXT,
        sources TEXT,
        tool_calls TEXT,
        tool_call_id TEXT,
        tool_name TEXT
    )
"""


def messages_with_tool_role(conn: sqlite3.Connection) -> None:
    """The messages table rebuilt with 'tool' among its roles (schema version 13)."""
    rebuild_messages(conn, _MESSAGES_WITH_TOOLS)


messages_with_tool_role.foreign_keys_off = True  # type: ignore[attr-defined]


def rebuild_messages(conn: sqlite3.Connection, create_rebuilt: str) -> None:
    """The messages table rebuilt as SQLite changes a CHECK or a foreign key:
    ``create_rebuilt`` makes ``messages_rebuilt``, every row is copied with its
    id (the full-text index and every reference stay valid), the old table
    dropped, the new one renamed, its indexes and triggers made again. Foreign
    keys are off meanwhile (the step says ``foreign_keys_off`` and ``migrate``
    sees to it), so dropping the old table cascades nowhere; they are checked
    before commit."""
    kept = [sql for (sql,) in conn.execute(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'messages'"
        " AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY type, name")]
    sequence = conn.execute(
        "SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
    conn.execute(create_rebuilt)
    # Every column both tables have: a database made on the tools branch before
    # the merge has the tool columns (kept) and no ``sources`` (left empty).
    old = {row[1] for row in conn.execute("PRAGMA table_info(messages)")}
    columns = ", ".join(row[1] for row in conn.execute("PRAGMA table_info(messages_rebuilt)")
                        if row[1] in old)
    conn.execute(f"INSERT INTO messages_rebuilt ({columns}) SELECT {columns} FROM messages")
    conn.execute("DROP TABLE messages")
    conn.execute("ALTER TABLE messages_rebuilt RENAME TO messages")
    for sql in kept:
        conn.execute(sql)
    if sequence is not None:  # ids of deleted messages are never given out again
        conn.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'messages'",
                     (sequence[0],))
    broken = [row for row in conn.execute("PRAGMA foreign_key_check")
              if "messages" in (row[0], row[2])]
    if broken:
        raise StoreError(f"The session database has {len(broken)} broken references after "
                         "the messages table was rebuilt; it is left as it was.")
