"""Every database draws its own tag for the KV file names it makes (schema 18),
an older database draws one as it migrates, and a prefix rewritten under a
fresh name gives its old file back for deletion."""

from __future__ import annotations

import re
from pathlib import Path

from mlxchat import paths
from mlxchat.chat import Pin
from mlxchat.store import PrefixRecord, SessionStore, kv_names, open_store
from tests.store.old_versions import database_at


def test_each_database_draws_its_own_tag_and_keeps_it(tmp_path: Path, home: Path) -> None:
    a, b = open_store(tmp_path / "a.db"), open_store(tmp_path / "b.db")
    tags = a.segments.file_tag(), b.segments.file_tag()
    a.close()
    b.close()
    assert all(re.fullmatch("[a-z]{8}", t) for t in tags) and tags[0] != tags[1]
    again = open_store(tmp_path / "a.db")
    assert again.segments.file_tag() == tags[0]
    assert kv_names.segment(tags[0], 3, 7, 0, 50) == f"seg-{tags[0]}-3-7-0-50.safetensors"
    again.close()


def test_a_version_17_database_draws_a_tag_as_it_migrates(tmp_path: Path, home: Path) -> None:
    database_at(tmp_path / "old.db", 17).close()
    store = open_store(tmp_path / "old.db")
    assert re.fullmatch("[a-z]{8}", store.segments.file_tag())
    store.close()


def test_a_prefix_rewritten_under_a_fresh_name_gives_its_old_file_back(
        store: SessionStore, home: Path) -> None:
    s = store.create_session("m")
    store.pins.replace(s.id, [Pin("d.md", "/d.md", "text", 1, "k1")])
    first = PrefixRecord("k1", "snapshots/prefix-t-k1.safetensors", "a", [1, 2], 10, None)
    assert store.prefixes.record(first) == []
    again = PrefixRecord("k1", "snapshots/prefix-t-k1-0a1b2c.safetensors", "b", [1, 2], 10,
                         None)
    assert store.prefixes.record(again) == [paths.kv_dir().resolve() / "prefix-t-k1.safetensors"]
    assert store.prefixes.record(again) == []  # the same file again: nothing to delete
    assert store.prefixes.get("k1").path == again.path
