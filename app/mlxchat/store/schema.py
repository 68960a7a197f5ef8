"""Schema of the session database: an ordered list of migrations by ``PRAGMA user_version``.

Migration N takes a database at version N-1 to version N, once, in one transaction with
its ``user_version`` bump (a crash mid-way leaves the previous version). Append; never edit.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Callable, Union

from mlxchat import paths
from mlxchat.store.api_response_schema import V20_API_RESPONSES
from mlxchat.store.docs_fts import V14_DOC_CHUNKS_FTS_BY_COLLECTION, V21_DOC_FILES_CHUNKER
from mlxchat.store.errors import StoreError, sqlite_errors
from mlxchat.store.image_files import V17_MESSAGE_IMAGES
from mlxchat.store.kv_names import V18_KV_FILE_TAG
from mlxchat.store.messages_rebuild import messages_with_tool_role
from mlxchat.store.parent_links import V19_PARENTS_WITHOUT_CASCADE
from mlxchat.store.summary_rows import V22_SUMMARY_MESSAGES
from mlxchat.store.tool_schema import V16_TOOL_GRANTS_AND_RUNS

V1_SESSIONS_AND_MESSAGES = (
    """
    CREATE TABLE sessions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL DEFAULT 'New chat',
        title_locked INTEGER NOT NULL DEFAULT 0,
        model TEXT NOT NULL DEFAULT '',
        system_prompt TEXT,
        settings TEXT NOT NULL DEFAULT '{}',
        created REAL NOT NULL,
        updated REAL NOT NULL,
        leaf_id INTEGER REFERENCES messages(id) ON DELETE SET NULL
    )
    """,
    """
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content TEXT NOT NULL,
        token_count INTEGER,
        stats TEXT,
        created REAL NOT NULL
    )
    """,
    "CREATE INDEX messages_by_session ON messages(session_id, id)",
    "CREATE INDEX messages_by_parent ON messages(parent_id)",
    "CREATE INDEX sessions_by_updated ON sessions(updated)",
)

V2_CANCELLED_AND_SNAPSHOTS = (
    "ALTER TABLE messages ADD COLUMN cancelled INTEGER NOT NULL DEFAULT 0",
    """
    CREATE TABLE snapshots (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        leaf_id INTEGER REFERENCES messages(id) ON DELETE SET NULL,
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        token_count INTEGER NOT NULL,
        file_bytes INTEGER NOT NULL,
        mlx_lm_version TEXT NOT NULL,
        kv_bits INTEGER,
        created REAL NOT NULL
    )
    """,
    "CREATE INDEX snapshots_by_session ON snapshots(session_id, id)",
)

# External-content FTS5 index over messages.content, kept in sync by triggers;
# 'rebuild' indexes the rows that existed before this migration.
V3_FULL_TEXT_SEARCH = (
    """
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        content, content='messages', content_rowid='id',
        tokenize='unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END
    """,
    """
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content)
            VALUES ('delete', old.id, old.content);
    END
    """,
    """
    CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content)
            VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END
    """,
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
)

V4_REPLY_DRAFTS = (
    # The reply being generated, checkpointed while it streams, so a crash or
    # a kill keeps what the user already saw; one row per session at most.
    """
    CREATE TABLE drafts (
        session_id INTEGER PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        content TEXT NOT NULL,
        updated REAL NOT NULL
    )
    """,
)


def relative_snapshot_paths(conn: sqlite3.Connection) -> None:
    """Snapshot rows recorded absolute become relative to the data folder when
    they lie in its snapshots folder; any other row is dropped (its file is
    treated as missing and left alone)."""
    folder = paths.kv_dir()
    for row_id, recorded in conn.execute("SELECT id, path FROM snapshots").fetchall():
        name = None
        absolute = Path(recorded)
        if absolute.is_absolute() and absolute.parent in (folder, folder.resolve()):
            name = paths.kv_file_name(folder / absolute.name)
        if name is None:
            conn.execute("DELETE FROM snapshots WHERE id = ?", (row_id,))
        else:
            conn.execute("UPDATE snapshots SET path = ? WHERE id = ?", (name, row_id))


V5_RELATIVE_SNAPSHOT_PATHS = (relative_snapshot_paths,)

Step = Union[str, Callable[[sqlite3.Connection], None]]

V6_TOKEN_LEDGER = (
    # Each message keeps the token ids it added when it was sent, so earlier
    # turns are never re-rendered. Older rows stay NULL: the next message
    # starts a ledger by rendering the conversation once.
    "ALTER TABLE messages ADD COLUMN token_ids BLOB",
    "ALTER TABLE messages ADD COLUMN ledger_key TEXT",
    "ALTER TABLE messages ADD COLUMN ledger_start INTEGER NOT NULL DEFAULT 0",
)

V7_KV_SEGMENTS = (
    # The KV cache on disk one turn at a time, keyed by the reply that ends it.
    """
    CREATE TABLE kv_segments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        start_token INTEGER NOT NULL,
        end_token INTEGER NOT NULL,
        path TEXT NOT NULL,
        checksum TEXT NOT NULL,
        file_bytes INTEGER NOT NULL,
        kv_bits INTEGER,
        token_ids BLOB NOT NULL,
        created REAL NOT NULL
    )
    """,
    "CREATE INDEX kv_segments_by_message ON kv_segments(message_id)",
    "CREATE INDEX kv_segments_by_session ON kv_segments(session_id)",
    "CREATE INDEX kv_segments_by_path ON kv_segments(path)",
)

V8_REASONING = (
    # A reasoning model's reply keeps its reasoning apart from its answer
    # (``content``); older rows and other models' replies stay NULL.
    "ALTER TABLE messages ADD COLUMN reasoning TEXT",
    "ALTER TABLE drafts ADD COLUMN reasoning TEXT",
)

V9_PINNED_DOCUMENTS = (
    # Documents pinned after a session's system prompt, in order; every pin of a
    # session names the KV prefix its system part shares with other sessions.
    """
    CREATE TABLE session_pins (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        name TEXT NOT NULL,
        path TEXT NOT NULL,
        text TEXT NOT NULL,
        text_hash TEXT NOT NULL,
        token_count INTEGER NOT NULL,
        prefix_key TEXT,
        created REAL NOT NULL
    )
    """,
    "CREATE INDEX session_pins_by_session ON session_pins(session_id, position)",
    "CREATE INDEX session_pins_by_prefix ON session_pins(prefix_key)",
    # The content-addressed store of those prefixes' KV: one file per key.
    """
    CREATE TABLE kv_prefixes (
        key TEXT PRIMARY KEY,
        path TEXT NOT NULL,
        checksum TEXT NOT NULL,
        token_ids BLOB NOT NULL,
        file_bytes INTEGER NOT NULL,
        kv_bits INTEGER,
        created REAL NOT NULL
    )
    """,
    # A session's segments start where its pinned prefix ends: they name it.
    "ALTER TABLE kv_segments ADD COLUMN prefix_key TEXT",
)

V10_DOCUMENT_COLLECTIONS = (
    # Named collections of the user's files, chunked for retrieval. ``roots``
    # (JSON) are the paths given to ``docs add``, walked again by an update;
    # ``generation`` changes with every write so a search's matrix is reloaded.
    """
    CREATE TABLE doc_collections (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        roots TEXT NOT NULL DEFAULT '[]',
        embedder TEXT NOT NULL,
        dims INTEGER NOT NULL,
        generation INTEGER NOT NULL DEFAULT 0,
        created REAL NOT NULL,
        updated REAL NOT NULL
    )
    """,
    # One row per indexed file: size, mtime and hash decide whether an update
    # re-chunks it.
    """
    CREATE TABLE doc_files (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        collection_id INTEGER NOT NULL REFERENCES doc_collections(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        kind TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        replaced_chars INTEGER NOT NULL DEFAULT 0,
        indexed REAL NOT NULL,
        UNIQUE (collection_id, path)
    )
    """,
    # A chunk keeps its place (lines, heading path) and its embedding as a
    # little-endian float16 blob; collection_id is repeated for the search scan.
    """
    CREATE TABLE doc_chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        file_id INTEGER NOT NULL REFERENCES doc_files(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL,
        position INTEGER NOT NULL,
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        heading TEXT NOT NULL DEFAULT '',
        text TEXT NOT NULL,
        token_count INTEGER NOT NULL,
        vector BLOB NOT NULL
    )
    """,
    "CREATE INDEX doc_chunks_by_collection ON doc_chunks(collection_id, id)",
    "CREATE INDEX doc_chunks_by_file ON doc_chunks(file_id)",
    """
    CREATE VIRTUAL TABLE doc_chunks_fts USING fts5(
        text, heading, content='doc_chunks', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER doc_chunks_fts_insert AFTER INSERT ON doc_chunks BEGIN
        INSERT INTO doc_chunks_fts(rowid, text, heading) VALUES (new.id, new.text, new.heading);
    END
    """,
    """
    CREATE TRIGGER doc_chunks_fts_delete AFTER DELETE ON doc_chunks BEGIN
        INSERT INTO doc_chunks_fts(doc_chunks_fts, rowid, text, heading)
            VALUES ('delete', old.id, old.text, old.heading);
    END
    """,
)

V11_API_MESSAGES = (
    # Messages that came through the HTTP API (or answered it), keyed by the
    # hash of the conversation up to and including them, so a stateless request
    # finds the stored branch it extends without rendering any history. A
    # session with rows here is one the API started or used.
    """
    CREATE TABLE api_messages (
        message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
        session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        chain_hash TEXT NOT NULL,
        created REAL NOT NULL
    )
    """,
    "CREATE INDEX api_messages_by_hash ON api_messages(chain_hash)",
    "CREATE INDEX api_messages_by_session ON api_messages(session_id)",
)

V12_MESSAGE_SOURCES = (
    # The chunks retrieved for a user message (JSON list of mlxchat.sources.Source:
    # collection, file, lines, score, tokens and the text as sent), kept with the
    # message so a reopened, branched or exported session never retrieves again.
    "ALTER TABLE messages ADD COLUMN sources TEXT",
)

V13_TOOL_MESSAGES = (
    # Tool results (role 'tool', with the call they answer and the tool's name)
    # and the calls a reply made (JSON), so a client's tool loop is stored as
    # sent and renders through the template as the model expects.
    messages_with_tool_role,
)

V15_FOLLOW_LINKS = (
    # Whether a collection's walk follows symlinks out of its folders (the user
    # said so with --follow-links); an update walks it the same way.
    "ALTER TABLE doc_collections ADD COLUMN follow_links INTEGER NOT NULL DEFAULT 0",
)

MIGRATIONS: tuple[tuple[Step, ...], ...] = (
    V1_SESSIONS_AND_MESSAGES, V2_CANCELLED_AND_SNAPSHOTS, V3_FULL_TEXT_SEARCH, V4_REPLY_DRAFTS,
    V5_RELATIVE_SNAPSHOT_PATHS, V6_TOKEN_LEDGER, V7_KV_SEGMENTS, V8_REASONING,
    V9_PINNED_DOCUMENTS, V10_DOCUMENT_COLLECTIONS, V11_API_MESSAGES, V12_MESSAGE_SOURCES,
    V13_TOOL_MESSAGES, V14_DOC_CHUNKS_FTS_BY_COLLECTION, V15_FOLLOW_LINKS,
    V16_TOOL_GRANTS_AND_RUNS, V17_MESSAGE_IMAGES, V18_KV_FILE_TAG, V19_PARENTS_WITHOUT_CASCADE,
    V20_API_RESPONSES, V21_DOC_FILES_CHUNKER, V22_SUMMARY_MESSAGES,
)
SCHEMA_VERSION = len(MIGRATIONS)


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def check_fts5(conn: sqlite3.Connection) -> None:
    """Refuse early, and clearly, on a Python whose SQLite lacks FTS5."""
    options = {row[0] for row in conn.execute("PRAGMA compile_options")}
    if "ENABLE_FTS5" not in options:
        try:
            conn.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
            conn.execute("DROP TABLE temp.fts5_probe")
        except sqlite3.OperationalError:
            raise StoreError(
                f"This Python's SQLite {sqlite3.sqlite_version} lacks FTS5 full-text search, "
                "which mlxchat needs; use a Python built with a standard SQLite."
            ) from None


def migrate(conn: sqlite3.Connection, path: str = "") -> int:
    """Bring the database up to SCHEMA_VERSION; return the version it was at.

    The connection must be in autocommit mode (``isolation_level=None``).
    """
    with sqlite_errors(path):
        found = user_version(conn)
        if found > SCHEMA_VERSION:
            raise StoreError(
                f"The session database{f' {path}' if path else ''} was written by a newer mlxchat "
                f"(schema {found}; this one reads up to {SCHEMA_VERSION}); "
                "upgrade mlxchat to open it."
            )
        if found == SCHEMA_VERSION:
            return found
        check_fts5(conn)
        for version in range(found + 1, SCHEMA_VERSION + 1):
            _run_migration(conn, version)
        return found


def _run_migration(conn: sqlite3.Connection, version: int) -> None:
    steps = MIGRATIONS[version - 1]
    # A table rebuild needs foreign keys off, which SQLite allows only outside
    # a transaction; they come back on however the migration ends.
    keys_off = any(getattr(step, "foreign_keys_off", False) for step in steps)
    keys_were = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    if keys_off:
        conn.execute("PRAGMA foreign_keys = OFF")
    # Re-read under the write lock: another process may have migrated meanwhile.
    conn.execute("BEGIN IMMEDIATE")
    try:
        if user_version(conn) < version:
            for step in steps:
                if callable(step):
                    step(conn)
                else:
                    conn.execute(step)
            # PRAGMA takes no parameters; version is our own int.
            conn.execute(f"PRAGMA user_version = {int(version)}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        if keys_off:
            conn.execute(f"PRAGMA foreign_keys = {'ON' if keys_were else 'OFF'}")
