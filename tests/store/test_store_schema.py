"""Schema versions, migrations, refusal of newer or damaged files, permissions, imports."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from mlxchat import paths
from mlxchat.store import SCHEMA_VERSION, SessionStore, StoreError, open_store
from mlxchat.store.api_response_schema import V20_API_RESPONSES
from mlxchat.store.docs_fts import V14_DOC_CHUNKS_FTS_BY_COLLECTION, V21_DOC_FILES_CHUNKER
from mlxchat.store.image_files import V17_MESSAGE_IMAGES
from mlxchat.store.kv_names import V18_KV_FILE_TAG
from mlxchat.store.parent_links import V19_PARENTS_WITHOUT_CASCADE
from mlxchat.store.schema import (
    MIGRATIONS,
    V11_API_MESSAGES,
    V12_MESSAGE_SOURCES,
    V13_TOOL_MESSAGES,
    V15_FOLLOW_LINKS,
)
from mlxchat.store.summary_rows import V22_SUMMARY_MESSAGES
from mlxchat.store.tool_schema import V16_TOOL_GRANTS_AND_RUNS

from tests.old_snapshots import record_old_snapshot

# The v1 schema exactly as mlxchat 0.1 shipped it: frozen here on purpose, so a
# change to migration 1 in the code cannot make this test pass by accident.
V1_DDL = """
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
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    token_count INTEGER,
    stats TEXT,
    created REAL NOT NULL
);
CREATE INDEX messages_by_session ON messages(session_id, id);
CREATE INDEX messages_by_parent ON messages(parent_id);
CREATE INDEX sessions_by_updated ON sessions(updated);
PRAGMA user_version = 1;
"""


def _make_v1(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(V1_DDL)
    settings = json.dumps({"temperature": 0.1, "max_tokens": 99})
    conn.execute(
        "INSERT INTO sessions (id, title, model, system_prompt, settings, created, updated)"
        " VALUES (1, 'Old chat', 'old-model', 'sys', ?, 100.0, 200.0)",
        (settings,),
    )
    conn.execute(
        "INSERT INTO messages VALUES (1, 1, NULL, 'user', 'about pelicans', 4, NULL, 101.0)"
    )
    conn.execute(
        "INSERT INTO messages VALUES (2, 1, 1, 'assistant', 'pelicans fly', 3, ?, 102.0)",
        (json.dumps({"ttft_s": 0.3, "generated_tokens": 3, "some_future_field": 1}),),
    )
    conn.execute("UPDATE sessions SET leaf_id = 2 WHERE id = 1")
    conn.commit()
    conn.close()


def test_migrations_are_ordered_and_versioned() -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS) == 22
    assert MIGRATIONS[10] is V11_API_MESSAGES  # version 11 exactly, after version 10
    assert MIGRATIONS[11] is V12_MESSAGE_SOURCES
    assert MIGRATIONS[12] is V13_TOOL_MESSAGES
    assert MIGRATIONS[13] is V14_DOC_CHUNKS_FTS_BY_COLLECTION
    assert MIGRATIONS[14] is V15_FOLLOW_LINKS
    assert MIGRATIONS[15] is V16_TOOL_GRANTS_AND_RUNS
    assert MIGRATIONS[16] is V17_MESSAGE_IMAGES
    assert MIGRATIONS[17] is V18_KV_FILE_TAG
    assert MIGRATIONS[18] is V19_PARENTS_WITHOUT_CASCADE
    assert MIGRATIONS[19] is V20_API_RESPONSES
    assert MIGRATIONS[20] is V21_DOC_FILES_CHUNKER
    assert MIGRATIONS[21] is V22_SUMMARY_MESSAGES


def test_a_v1_database_migrates_and_keeps_its_data(db_path: Path) -> None:
    _make_v1(db_path)
    store = open_store(db_path)
    assert sqlite3.connect(db_path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    old = store.get_session(1)
    assert (old.title, old.model, old.system_prompt) == ("Old chat", "old-model", "sys")
    assert old.settings.temperature == 0.1 and old.settings.max_tokens == 99
    assert [m.content for m in old.messages] == ["about pelicans", "pelicans fly"]
    assert old.messages[1].stats is not None and old.messages[1].stats.ttft_s == 0.3
    assert not old.messages[1].cancelled  # v2 column, defaulted for old rows
    # v3: rows that existed before the migration are searchable, and new ones too.
    assert [r.id for r in store.list_sessions(search="pelicans")] == [1]
    new = store.add_message(1, "user", "and herons?")
    assert store.list_sessions(search="herons")[0].snippet == "and [herons]?"
    # v2: snapshots work (rows as mlxchat kept them before segments).
    record_old_snapshot(store, 1, new.id, paths.kv_dir() / "x.safetensors",
                        sha256="ab", token_count=9, file_bytes=5, mlx_lm_version="0.32.0")
    assert store.snapshots.referenced_paths() == {paths.kv_dir().resolve() / "x.safetensors"}
    assert store.snapshots.latest(1).token_count == 9  # type: ignore[union-attr]
    store.close()
    # Reopening applies nothing twice.
    again = open_store(db_path)
    assert len(again.get_session(1).messages) == 3
    assert again.list_sessions(search="pelicans")[0].id == 1


def test_every_intermediate_version_opens(tmp_path: Path) -> None:
    for version in range(SCHEMA_VERSION + 1):
        path = tmp_path / f"v{version}.db"
        conn = sqlite3.connect(path, isolation_level=None)
        for statements in MIGRATIONS[:version]:
            for statement in statements:
                statement(conn) if callable(statement) else conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.close()
        store = open_store(path)
        s = store.create_session("m")
        store.add_message(s.id, "user", "findable")
        assert store.list_sessions(search="findable")[0].id == s.id
        store.close()


def test_a_newer_database_is_refused(db_path: Path) -> None:
    open_store(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError) as err:
        open_store(db_path)
    message = str(err.value)
    assert "newer mlxchat" in message and "upgrade" in message and "\n" not in message


@pytest.mark.parametrize(
    "content", [b"this is not a database at all" * 100, b"SQLite format 3\x00" + b"\xff" * 4000]
)
def test_a_damaged_file_gives_a_clear_error(db_path: Path, content: bytes) -> None:
    db_path.write_bytes(content)
    with pytest.raises(StoreError) as err:
        open_store(db_path)
    message = str(err.value)
    assert (
        "damaged or not a SQLite file" in message
        and str(db_path) in message
        and "\n" not in message
    )


def test_a_failed_migration_leaves_the_previous_version(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _make_v1(db_path)
    import mlxchat.store.schema as schema

    broken = (*schema.MIGRATIONS[:2], ("CREATE TABLE half_done (x)", "THIS IS NOT SQL"))
    monkeypatch.setattr(schema, "MIGRATIONS", broken)
    with pytest.raises(StoreError):
        open_store(db_path)
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    assert (
        conn.execute("SELECT name FROM sqlite_master WHERE name = 'half_done'").fetchone() is None
    )


def test_session_store_takes_a_connection(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db")
    store = SessionStore(conn)
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    assert store.create_session("m").id == 1
    memory = SessionStore(sqlite3.connect(":memory:"))
    assert memory.create_session("m").id == 1


def test_default_location_is_private(home: Path) -> None:
    old = os.umask(0o022)
    try:
        store = open_store()
        s = store.create_session("m")
        store.add_message(s.id, "user", "private")
        db = paths.database_file()
        assert db.is_relative_to(home) and db.exists()
        assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
        for f in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        store.close()
    finally:
        os.umask(old)
