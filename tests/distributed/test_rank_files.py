"""Deleting a session, or dropping its cache, removes a split model's other
ranks' local segment files and rank 0's manifests with each row's file."""

from __future__ import annotations

import shutil
from pathlib import Path

from mlxchat import paths
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.distributed.rank_files import Manifest, rank_file
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store


def _split_like(folder: Path) -> list[Path]:
    """Give every segment file in ``folder`` a rank-1 twin and a 2-rank manifest
    (what a 2-rank run on one machine leaves); all the files, sorted."""
    for seg in list(folder.glob("seg-*.safetensors")):
        shutil.copy(seg, seg.with_name(rank_file(seg.name, 1, 2)))
        Manifest("2 ranks · tensor", 2, [{"name": seg.name}, {"name": rank_file(seg.name, 1, 2)}]
                 ).write(seg)
    return sorted(folder.iterdir())


class SplitLike(ChatEngine):
    """One process standing in for rank 0: its segments are kept per rank
    (never joined), as a split engine's are."""

    segments_per_rank = True


def _conversation(tiny, store) -> Conversation:
    settings = Settings()
    settings.generation.max_tokens, settings.generation.temperature = 4, 0.0
    return Conversation(settings=settings, store=store, engine=SplitLike(tiny),
                        model_spec="tiny")


def _talk(conv: Conversation) -> None:
    for text in ("hello", "and again"):
        list(conv.turns.send(text))


def test_drop_and_delete_remove_rank_files_and_manifests(tiny, tmp_path):
    store = open_store(tmp_path / "s.db")
    conv = _conversation(tiny, store)
    _talk(conv)
    folder = paths.kv_dir()
    files = _split_like(folder)
    assert sum(".rank1of2." in f.name for f in files) == 2
    assert sum(f.name.endswith(".ranks.json") for f in files) == 2
    assert conv.cache.drop() == 6
    assert [f for f in folder.iterdir() if f.name.startswith("seg-")] == []

    _talk(conv)
    other = _conversation(tiny, store)
    _talk(other)
    _split_like(folder)

    tag = store.segments.file_tag()

    def of(session_id: int) -> list[str]:
        return sorted(f.name for f in folder.iterdir()
                      if f.name.startswith(f"seg-{tag}-{session_id}-"))
    mine, theirs = of(conv.session.id), of(other.session.id)
    assert len(mine) == len(theirs) == 6
    other_id = other.session.id
    other.close()
    assert conv.delete_session(other_id).left == []
    assert of(other_id) == [] and of(conv.session.id) == mine
    conv.close()
