"""Full-text search over message content (SQLite FTS5), safe for any user string."""

from __future__ import annotations

import sqlite3

SNIPPET_TOKENS = 12


def fts_query(text: str) -> str | None:
    """Turn what the user typed into an FTS5 query that cannot be a syntax error.

    Every whitespace-separated word becomes a quoted phrase (quotes doubled), so
    operators such as ``AND (``, ``NEAR`` or ``:`` are searched as text. A word
    ending in ``*`` keeps its prefix meaning; a phrase with no word characters
    (``*``, ``(``) matches nothing and is ignored by FTS5. None for a blank string.
    """
    text = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", " ")
    terms = []
    for word in text.split():
        prefix = len(word) > 1 and word.endswith("*")
        word = word.rstrip("*") if prefix else word
        quoted = '"' + word.replace('"', '""') + '"'
        terms.append(quoted + "*" if prefix else quoted)
    return " ".join(terms) if terms else None


def matching_sessions(conn: sqlite3.Connection, text: str) -> dict[int, str]:
    """Sessions whose messages (or titles) match ``text``: id -> snippet, best match first.

    The snippet marks the matched words with [brackets].
    """
    found: dict[int, str] = {}
    query = fts_query(text)
    if query is not None:
        rows = conn.execute(
            """
            SELECT m.session_id, snippet(messages_fts, 0, '[', ']', '…', ?)
            FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid
            WHERE messages_fts MATCH ?
            ORDER BY bm25(messages_fts)
            """,
            (SNIPPET_TOKENS, query),
        )
        for session_id, snippet in rows:
            found.setdefault(session_id, " ".join(snippet.split()))
    needle = text.strip().casefold()
    if needle:
        for session_id, title in conn.execute("SELECT id, title FROM sessions"):
            if session_id not in found and needle in title.casefold():
                found[session_id] = title
    return found
