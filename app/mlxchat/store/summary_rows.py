"""Schema version 22: summary messages. A compaction stores the summary it
wrote as a message of role ``summary`` after the last message it was made on,
with what it stands for (``compaction``: JSON of ``chat.Compaction``); the
messages it summarized stay where they were.
"""

from __future__ import annotations

import json
import sqlite3

from mlxchat.chat import Compaction
from mlxchat.store.messages_rebuild import rebuild_messages

_MESSAGES_WITH_SUMMARIES = """
    CREATE TABLE messages_rebuilt (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES messages(id),
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool', 'summary')),
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
        images TEXT,
        compaction TEXT
    )
"""


def messages_with_summaries(conn: sqlite3.Connection) -> None:
    """The messages table rebuilt with 'summary' among its roles and a
    ``compaction`` column."""
    rebuild_messages(conn, _MESSAGES_WITH_SUMMARIES)


messages_with_summaries.foreign_keys_off = True  # type: ignore[attr-defined]

V22_SUMMARY_MESSAGES = (messages_with_summaries,)


def compaction_to_json(compaction: Compaction | None) -> str | None:
    return json.dumps(compaction.to_dict()) if compaction is not None else None


def compaction_from_json(text: str | None) -> Compaction | None:
    """A summary's stored record; an unreadable one (a hand edit) reads as none,
    and the summary is then left out of what the model sees."""
    try:
        data = json.loads(text) if text else None
        found = Compaction.from_dict(data) if isinstance(data, dict) else None
    except (ValueError, TypeError):
        return None
    return found if found is not None and isinstance(found.kept, int) else None
