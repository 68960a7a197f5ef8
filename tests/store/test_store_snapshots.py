"""Snapshot rows: newest wins, older files are handed back only after the new row commits."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mlxchat import paths
from mlxchat.store import SessionStore, StoreError


@pytest.fixture
def snaps() -> Path:
    """This home's snapshots folder: the only place a snapshot row may point."""
    return paths.snapshots_dir().resolve()


def _record(
    store: SessionStore, sid: int, leaf: int | None, path: Path | str, tokens: int = 10
) -> list[Path]:
    return store.snapshots.record(
        sid,
        leaf,
        path,
        sha256="0" * 64,
        token_count=tokens,
        file_bytes=tokens * 100,
        mlx_lm_version="0.32.1",
        kv_bits=8,
    )


def test_record_returns_obsolete_files_and_latest_is_the_new_one(
    store: SessionStore, snaps: Path, db_path: Path
) -> None:
    s = store.create_session("m")
    m1 = store.add_message(s.id, "user", "hi")
    assert store.snapshots.latest(s.id) is None
    assert _record(store, s.id, m1.id, snaps / "one.safetensors") == []
    m2 = store.add_message(s.id, "assistant", "hello")
    obsolete = _record(store, s.id, m2.id, snaps / "two.safetensors", tokens=20)
    assert obsolete == [snaps / "one.safetensors"]
    # By the time the caller sees the list, the new row is committed: another connection sees it.
    row = sqlite3.connect(db_path).execute("SELECT path FROM snapshots").fetchall()
    assert row == [("snapshots/two.safetensors",)]  # relative to the data folder
    latest = store.snapshots.latest(s.id)
    assert latest is not None
    assert (latest.leaf_id, latest.path, latest.token_count, latest.file_bytes, latest.kv_bits) == (
        m2.id,
        snaps / "two.safetensors",
        20,
        2000,
        8,
    )
    assert latest.mlx_lm_version == "0.32.1" and latest.sha256 == "0" * 64
    assert store.list_sessions()[0].snapshot_bytes == 2000


def test_rewriting_the_same_file_name_never_returns_it(store: SessionStore, snaps: Path) -> None:
    s = store.create_session("m")
    path = snaps / "session-1.safetensors"
    _record(store, s.id, None, path)
    assert _record(store, s.id, None, path) == []
    assert store.snapshots.referenced_paths() == {path}


def test_drop_snapshots_and_leaf_checks(store: SessionStore, snaps: Path) -> None:
    s, other = store.create_session("m"), store.create_session("m")
    foreign = store.add_message(other.id, "user", "x")
    with pytest.raises(StoreError):
        _record(store, s.id, foreign.id, snaps / "x")
    with pytest.raises(StoreError):
        _record(store, 999, None, snaps / "x")
    _record(store, s.id, None, snaps / "a")
    _record(store, other.id, None, snaps / "b")
    assert store.snapshots.drop(s.id) == [snaps / "a"]
    assert store.snapshots.latest(s.id) is None and store.snapshots.latest(other.id) is not None
    assert store.snapshots.drop(s.id) == []
