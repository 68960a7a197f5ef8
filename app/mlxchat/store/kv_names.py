"""Names of the KV cache files a database writes into the snapshots folder.

Every name carries the database's tag, a random word its migration draws once
(schema version 18), so two databases sharing a data folder (a second one, one
recreated beside old files, a restored backup's copy) make different names,
and a sweep of a session's files that no row names looks only at this
database's. A name may still be taken (the same database restored from a
backup makes its names again): writers never replace a file, they take a fresh
name beside it (``files.link_new``). Files named before tags
(``seg-{session}-...``, ``prefix-{key}``) keep working, since rows hold their
paths; no sweep touches them, as no database can tell it owns them.
"""

from __future__ import annotations

import secrets
import sqlite3
import string


def _draw_tag(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO kv_file_tag (one, tag) VALUES (1, ?)", (new_tag(),))


V18_KV_FILE_TAG = (
    # The word every KV file name of this database carries (see above).
    "CREATE TABLE kv_file_tag (one INTEGER PRIMARY KEY CHECK (one = 1), tag TEXT NOT NULL)",
    _draw_tag,
)


def new_tag() -> str:
    """Eight random lowercase letters: never digits, so a tagged name never reads
    as an older ``seg-{session}-...`` one."""
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(8))


def read_tag(cur: sqlite3.Cursor) -> str:
    return str(cur.execute("SELECT tag FROM kv_file_tag WHERE one = 1").fetchone()[0])


def segment(tag: str, session_id: int, leaf: int, start: int, end: int) -> str:
    """A turn's segment: positions ``[start, end)`` of the branch ending at ``leaf``."""
    return f"seg-{tag}-{session_id}-{leaf}-{start}-{end}.safetensors"


def joined(tag: str, session_id: int, start: int, end: int) -> str:
    """Consecutive segments of a session joined into one (``session.compaction``)."""
    return f"cmp-{tag}-{session_id}-{start}-{end}.safetensors"


def prefix(tag: str, key: str) -> str:
    """A pinned prefix, by its content key."""
    return f"prefix-{tag}-{key}.safetensors"


def session_patterns(tag: str, session_id: int) -> tuple[str, ...]:
    """Globs of the segment and joined files this database names for the session
    (fresh names taken beside a busy one included)."""
    return (f"seg-{tag}-{session_id}-*.safetensors", f"cmp-{tag}-{session_id}-*.safetensors")


def joined_temps(tag: str, session_id: int) -> str:
    """The glob of the temp files joined files are written to (``paths.kv_temp_file``)."""
    return f".cmp-{tag}-{session_id}-*.tmp.safetensors"
