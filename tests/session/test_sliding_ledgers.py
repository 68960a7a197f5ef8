"""A sliding-window model's cache cannot be trimmed once the window wrapped, so
what a branch's token ledger is matters: a fork continues from the cache its
source left (same ledger, same template date) instead of re-prefilling the
whole branch, and after a new ledger (a new system prompt) the branch's files
are the new ledger's, joined and restored exactly."""

from __future__ import annotations

import pytest

from mlxchat import paths
from mlxchat.models import load_folder

from tests.families.builders import FAMILIES, write_family_model
from tests.session.test_compaction import last, make

LONG = "Summarize this: " + " ".join(["river mountain valley forest ocean"] * 8)


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    family = next(f for f in FAMILIES if f.name == "gemma3")
    folder = write_family_model(family, tmp_path_factory.mktemp("gemma3"))
    return load_folder(folder, name="tiny", spec="tiny")


def test_the_first_turn_of_a_fork_reuses_the_whole_branch(gemma3, tmp_path):
    conv = make(gemma3, tmp_path / "s.db")
    last(conv.turns.send(LONG))  # far past the 24-token window
    last(conv.turns.send("And the ocean?"))
    source = conv.session
    held = len(conv.engine.cached_tokens)
    _, copy = conv.fork()
    assert copy.created == source.created
    done = last(conv.turns.send("What about mountains?"))
    assert done.stats.miss_reason is None
    assert done.stats.reused_tokens == held
    conv.close(compact=False)


def test_after_a_new_ledger_the_branch_files_are_the_new_ones_joined(gemma3, tmp_path):
    conv = make(gemma3, tmp_path / "s.db")
    for q in (LONG, "And the ocean?"):
        last(conv.turns.send(q))
    conv.set_system_prompt("Be very brief.")
    new_ledger = last(conv.turns.send("And rivers?"))  # the wrapped cache starts over: says why
    assert new_ledger.stats.miss_reason == "system prompt changed; cache not trimmable"
    last(conv.turns.send("And lakes?"))
    held = list(conv.engine.cached_tokens)
    rows = conv.store.segments.on_branch(conv.session.leaf_id)
    assert [r.start for r in rows] == [0, rows[0].end]  # the old ledger's rows left out
    done = conv.cache.compact()
    assert done is not None and done.written == 1
    joined = {r.path for r in conv.store.segments.on_branch(conv.session.leaf_id)}
    assert len(joined) == 1 and paths.kv_file(joined.pop()).is_file()
    sid = conv.session.id
    conv.close(compact=False)
    again = make(gemma3, tmp_path / "s.db")
    again.open_session(sid)
    assert again.cache.last_load.ok and again.cache.last_load.tokens == len(held)
    assert list(again.engine.cached_tokens) == held
    again.close(compact=False)
