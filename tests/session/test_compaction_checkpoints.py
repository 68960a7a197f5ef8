"""Models whose cache keeps checkpoints instead of positions (sliding windows,
recurrent states) are joined too: the joined file keeps every source's
checkpoint, so the branch, and a fork that ends where a source ended,
restore from it exactly."""

from __future__ import annotations

import json

import pytest
from mlx_lm.models.cache import ArraysCache, RotatingKVCache

from mlxchat import paths
from mlxchat.engine.disk import segment_file
from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model

from tests.families.builders import FAMILIES, write_family_model
from tests.session.test_compaction import last, make

QUESTIONS = ("Tell me one long thing about rivers and the sea.", "Two more?", "Three!")


def _family(name: str):
    return next(f for f in FAMILIES if f.name == name)


@pytest.fixture(scope="module", params=["sliding-llama", "gemma3", "qwen3_next"])
def model(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "sliding-llama":
        written = write_tiny_model(folder, sliding_window=16)
    else:
        written = write_family_model(_family(request.param), folder)
    return load_folder(written, name="tiny", spec="tiny")


def rows_of(conv: Conversation, leaf: int):
    return conv.store.segments.on_branch(leaf)


def test_a_checkpointed_branch_and_its_fork_restore_exactly_from_the_joined_file(
        model, tmp_path):
    conv = make(model, tmp_path / "s.db")
    kinds = {type(c) for c in conv.engine.live_view().cache()}
    assert kinds & {RotatingKVCache, ArraysCache}  # the layouts this is about
    for q in QUESTIONS:
        last(conv.turns.send(q))
    first_leaf = conv.session.leaf_id
    last(conv.turns.retry())  # a second branch: it shares the first two turns' files
    second_leaf = conv.session.leaf_id
    sid = conv.session.id
    done = conv.cache.compact()
    assert done is not None and done.warning is None and done.written == 1
    [joined] = {r.path for r in rows_of(conv, second_leaf)}
    first_rows = rows_of(conv, first_leaf)
    # The first branch now restores its shared part from inside the joined file:
    # it ends where a source file ended, before the joined file's end.
    inside = [r for r in first_rows if r.path == joined]
    assert inside and inside[-1].end < rows_of(conv, second_leaf)[-1].end
    opened = segment_file.open_file(paths.kv_file(joined))
    try:
        assert str(inside[-1].end) in json.loads(opened.meta["checkpoints"])
        assert any(t.name.endswith(f"@{inside[-1].end}") for t in opened.tensors)
    finally:
        opened.close()
    conv.close(compact=False)
    warm = make(model, tmp_path / "w.db")  # what a warm cache answers next (greedy:
    for q in QUESTIONS:                   # the retried reply is the same text)
        last(warm.turns.send(q))
    expected = last(warm.turns.send("Four.")).token_ids
    warm.close(compact=False)

    for leaf in (first_leaf, second_leaf):
        again = make(model, tmp_path / "s.db")
        again.open_session(sid)
        again.saved.switch_branch(leaf)
        rows = rows_of(again, leaf)
        again.cache.restore()
        assert again.cache.last_load.ok and again.cache.last_load.reason is None
        assert again.views.state().cached_tokens == rows[-1].end
        nxt = last(again.turns.send("Four."))
        assert (nxt.stats.cache_source, nxt.stats.reused_tokens) == ("snapshot", rows[-1].end), (
            leaf, nxt.stats.miss_reason)
        assert nxt.token_ids == expected
        again.close(compact=False)


def test_joining_a_joined_file_keeps_the_checkpoints_it_took(model, tmp_path):
    conv = make(model, tmp_path / "s.db")
    for q in QUESTIONS[:2]:
        last(conv.turns.send(q))
    assert conv.cache.compact().written == 1
    last(conv.turns.send(QUESTIONS[2]))
    assert conv.cache.compact().joined == 2  # the joined file and the new turn's
    rows = rows_of(conv, conv.session.leaf_id)
    [joined] = {r.path for r in rows}
    opened = segment_file.open_file(paths.kv_file(joined))
    try:
        taken = json.loads(opened.meta["checkpoints"])
    finally:
        opened.close()
    # Every turn boundary but the last keeps its checkpoint.
    ends = sorted({r.end for r in rows})
    assert sorted(int(e) for e in taken) == [e for e in ends[:-1] if str(e) in taken]
    assert len(taken) >= 2
    sid, held = conv.session.id, conv.views.state().cached_tokens
    conv.close(compact=False)
    again = make(model, tmp_path / "s.db")
    again.open_session(sid)
    assert again.cache.last_load.ok and again.views.state().cached_tokens == held
    again.close(compact=False)
