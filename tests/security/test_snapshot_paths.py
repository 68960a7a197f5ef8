"""Snapshot files are found and deleted only inside the current home's snapshots
folder; a moved or copied home uses its own files (issue 9, item 2)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from mlxchat import paths
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store
from mlxchat.store.schema import MIGRATIONS


def make(tiny, session=None) -> Conversation:  # noqa: F811
    settings = Settings(system_prompt="Be brief.")
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 4
    return Conversation(settings=settings, store=open_store(), engine=ChatEngine(tiny),
                        model_spec="tiny", session=session)


def turn(conv: Conversation, text: str) -> TurnDone:
    return [e for e in conv.turns.send(text) if isinstance(e, TurnDone)][-1]


def close(conv: Conversation) -> None:
    conv.close()
    conv.store.close()


def snapshot_files(home: Path) -> set[str]:
    return {p.name for p in (home / "data" / "snapshots").glob("*.safetensors")}


def test_a_copied_home_neither_reads_nor_deletes_the_originals_snapshots(
        tiny, mlxchat_home, tmp_path, monkeypatch):  # noqa: F811
    conv = make(tiny)
    turn(conv, "Hello there.")
    sid = conv.session.id
    close(conv)
    original = snapshot_files(mlxchat_home)
    assert original
    copy = tmp_path / "copy"
    shutil.copytree(mlxchat_home, copy, symlinks=True)
    monkeypatch.setenv("MLXCHAT_HOME", str(copy))
    again = make(tiny)
    again.open_session(sid)
    assert again.cache.last_load is not None and again.cache.last_load.ok
    [record] = again.store.segments.on_branch(again.session.leaf_id)
    assert paths.kv_file(record.path).is_relative_to(copy.resolve())
    turn(again, "And then?")
    close(again)
    assert snapshot_files(mlxchat_home) == original  # the original home is untouched
    assert snapshot_files(copy) and snapshot_files(copy) != original


def test_a_moved_home_keeps_working(tiny, mlxchat_home, tmp_path, monkeypatch):  # noqa: F811
    conv = make(tiny)
    turn(conv, "Hello there.")
    sid = conv.session.id
    close(conv)
    moved = tmp_path / "moved"
    shutil.move(str(mlxchat_home), moved)
    monkeypatch.setenv("MLXCHAT_HOME", str(moved))
    again = make(tiny)
    again.open_session(sid)
    assert again.cache.last_load is not None and again.cache.last_load.ok
    done = turn(again, "And then?")
    assert done.stats.cache_source == "snapshot" and done.stats.reused_tokens > 0
    close(again)


@pytest.mark.parametrize("recorded", ["{victim}", "snapshots/../../../{name}",
                                      "snapshots/link.safetensors"])
def test_a_crafted_row_is_never_read_or_deleted(tiny, mlxchat_home, tmp_path,  # noqa: F811
                                                 recorded):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    conv = make(tiny)
    turn(conv, "Hello there.")
    folder = paths.kv_dir()
    (folder / "link.safetensors").symlink_to(victim)
    row = recorded.format(victim=victim, name=Path(*victim.parts[-3:]))
    db = sqlite3.connect(paths.database_file())
    db.execute("UPDATE kv_segments SET path = ?", (row,))
    db.commit()
    db.close()
    [crafted] = conv.store.segments.on_branch(conv.session.leaf_id)
    assert paths.kv_file(crafted.path) is None  # treated as missing
    conv.engine.drop_cache()  # else the live cache is kept and no file is even looked at
    conv.cache.restore()
    assert not conv.cache.last_load.ok and "file missing" in conv.cache.last_load.reason
    turn(conv, "Again.")  # a new segment, in the snapshots folder
    assert paths.kv_file(conv.store.segments.on_branch(conv.session.leaf_id)[-1].path)
    db = sqlite3.connect(paths.database_file())
    db.execute("UPDATE kv_segments SET path = ?", (row,))
    db.commit()
    db.close()
    conv.cache.drop()
    close(conv)
    assert victim.read_text() == "precious"


def test_the_migration_keeps_rows_inside_the_data_folder_and_drops_the_rest(tmp_path):
    db_file = paths.database_file()
    paths.ensure_private_dir(db_file.parent)
    conn = sqlite3.connect(db_file, isolation_level=None)
    for statements in MIGRATIONS[:4]:
        for statement in statements:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 4")
    conn.execute("INSERT INTO sessions (id, created, updated) VALUES (1, 0, 0), (2, 0, 0)")
    inside = paths.kv_dir() / "session-1-None.safetensors"
    for sid, path in ((1, str(inside)), (2, str(tmp_path / "elsewhere.safetensors"))):
        conn.execute("INSERT INTO snapshots (session_id, path, sha256, token_count, file_bytes,"
                     " mlx_lm_version, created) VALUES (?, ?, 'x', 1, 1, 'v', 0)", (sid, path))
    conn.close()
    store = open_store()
    rows = sqlite3.connect(db_file).execute(
        "SELECT session_id, path FROM snapshots ORDER BY session_id").fetchall()
    assert rows == [(1, "snapshots/session-1-None.safetensors")]
    assert store.snapshots.latest(1).path == inside.resolve()  # type: ignore[union-attr]
    assert store.snapshots.latest(2) is None
    store.close()
