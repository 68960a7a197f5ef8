"""Snapshot rows from before KV segments: the newest is the one read, dropping
hands back each file once (only after the rows are gone), and a file another
session's row still names is never handed back."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mlxchat import paths
from mlxchat.store import SessionStore

from tests.old_snapshots import record_old_snapshot


@pytest.fixture
def snaps() -> Path:
    """This home's snapshots folder: the only place a snapshot row may point."""
    return paths.kv_dir().resolve()


def _record(store: SessionStore, sid: int, leaf: int | None, path: Path | str,
            tokens: int = 10) -> None:
    record_old_snapshot(store, sid, leaf, path, sha256="0" * 64, token_count=tokens,
                        file_bytes=tokens * 100, mlx_lm_version="0.32.1", kv_bits=8)


def test_latest_is_the_newest_row_and_dropping_returns_every_file(
    store: SessionStore, snaps: Path, db_path: Path
) -> None:
    s = store.create_session("m")
    m1 = store.add_message(s.id, "user", "hi")
    assert store.snapshots.latest(s.id) is None
    _record(store, s.id, m1.id, snaps / "one.safetensors")
    m2 = store.add_message(s.id, "assistant", "hello")
    _record(store, s.id, m2.id, snaps / "two.safetensors", tokens=20)
    rows = sqlite3.connect(db_path).execute("SELECT path FROM snapshots ORDER BY id").fetchall()
    assert rows == [("snapshots/one.safetensors",), ("snapshots/two.safetensors",)]
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
    assert store.snapshots.drop(s.id) == [snaps / "one.safetensors", snaps / "two.safetensors"]
    # By the time the caller sees the list, the rows are gone: another connection agrees.
    assert sqlite3.connect(db_path).execute("SELECT count(*) FROM snapshots").fetchone() == (0,)


def test_a_file_named_twice_is_returned_once(store: SessionStore, snaps: Path) -> None:
    s = store.create_session("m")
    path = snaps / "session-1.safetensors"
    _record(store, s.id, None, path)
    _record(store, s.id, None, path)
    assert store.snapshots.referenced_paths() == {path}
    assert store.snapshots.drop(s.id) == [path]
    assert store.snapshots.referenced_paths() == set()


def test_drop_snapshots_keeps_other_sessions_and_their_files(store: SessionStore,
                                                             snaps: Path) -> None:
    s, other = store.create_session("m"), store.create_session("m")
    _record(store, s.id, None, snaps / "a")
    _record(store, s.id, None, snaps / "shared")
    _record(store, other.id, None, snaps / "b")
    _record(store, other.id, None, snaps / "shared")
    assert store.snapshots.drop(s.id) == [snaps / "a"]  # "shared" is still named
    assert store.snapshots.latest(s.id) is None and store.snapshots.latest(other.id) is not None
    assert store.snapshots.drop(s.id) == []
    assert store.snapshots.referenced_paths() == {snaps / "b", snaps / "shared"}
