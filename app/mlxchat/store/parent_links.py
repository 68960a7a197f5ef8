"""Schema version 19: a message's link to its parent cascades nowhere.

Until version 17 ``messages.parent_id`` was ``ON DELETE CASCADE``: SQLite runs
a cascade as a trigger, one level per message, so deleting the root of a chain
of more than 1,000 messages (SQLITE_MAX_TRIGGER_DEPTH) failed with "too many
levels of trigger recursion", and a shorter one nested as deep as it was long.
The link is now a plain reference: a statement that deletes a message deletes
every message below it too (a whole session, or a subtree's ids from a
recursive CTE, which has no depth limit), and one that would leave a message
without its parent fails, as any broken reference does.
"""

from __future__ import annotations

import sqlite3

from mlxchat.store.messages_rebuild import rebuild_messages

_MESSAGES_WITH_PLAIN_PARENTS = """
    CREATE TABLE messages_rebuilt (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES messages(id),
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
        tool_name TEXT,
        tool_run TEXT,
        images TEXT
    )
"""


def parents_without_cascade(conn: sqlite3.Connection) -> None:
    """The messages table rebuilt with ``parent_id`` a plain reference."""
    rebuild_messages(conn, _MESSAGES_WITH_PLAIN_PARENTS)


parents_without_cascade.foreign_keys_off = True  # type: ignore[attr-defined]

V19_PARENTS_WITHOUT_CASCADE = (
    parents_without_cascade,
    # Deleting a message looks for the rows that name it; unindexed, each
    # deleted message read every session: 5,000 of them beside 1,000 other
    # sessions took 1.7 s instead of 0.04 s.
    "CREATE INDEX sessions_by_leaf ON sessions(leaf_id)",
    "CREATE INDEX snapshots_by_leaf ON snapshots(leaf_id)",
    "CREATE INDEX drafts_by_parent ON drafts(parent_id)",
)
