"""A fork continues from the cache its source left: its token ledger is the
source's (same template date), so a sliding-window model, whose cache cannot
be trimmed once the window wrapped, does not re-prefill the whole branch."""

from __future__ import annotations

import pytest

from mlxchat.models.loader import load_folder

from tests.engine.test_compaction import last, make
from tests.families.builders import FAMILIES, write_family_model

LONG = "Summarize this: " + " ".join(["river mountain valley forest ocean"] * 8)


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    family = next(f for f in FAMILIES if f.name == "gemma3")
    folder = write_family_model(family, tmp_path_factory.mktemp("gemma3"))
    return load_folder(folder, name="tiny", spec="tiny")


def test_the_first_turn_of_a_fork_reuses_the_whole_branch(gemma3, tmp_path):
    conv = make(gemma3, tmp_path / "s.db")
    last(conv.send(LONG))  # far past the 24-token window
    last(conv.send("And the ocean?"))
    source = conv.session
    held = len(conv.engine.cached_tokens)
    _, copy = conv.fork()
    assert copy.created == source.created
    done = last(conv.send("What about mountains?"))
    assert done.stats.miss_reason is None
    assert done.stats.reused_tokens == held
    conv.close(compact=False)
