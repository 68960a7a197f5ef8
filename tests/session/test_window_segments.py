"""Through a real conversation on the Gemma 3 and gpt-oss tiny families
(with a window of 128, so a follow-up is shorter than it): each turn's segment holds the window rows it changed,
not the whole window, and a session resumed from those files answers with the
same greedy tokens as the warm process and as a cold prefill of the history."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest

from mlxchat import paths
from mlxchat.engine.disk import segment_file
from mlxchat.models import load_folder

from tests.families.builders import FAMILIES, write_family_model
from tests.session.test_compaction import last, make, warm_answer

QUESTIONS = ("Summarize this: " + " ".join(["river mountain valley forest ocean"] * 6),
             "And the ocean?", "Why?")
NEXT = "And the forest?"
WINDOW = 128


@pytest.fixture(scope="module", params=["gemma3", "gpt_oss"])
def model(request, tmp_path_factory):
    base = next(f for f in FAMILIES if f.name == request.param)
    family = dataclasses.replace(base, config={**base.config, "sliding_window": WINDOW},
                                 window=WINDOW)
    folder = write_family_model(family, tmp_path_factory.mktemp(request.param))
    return load_folder(folder, name="tiny", spec="tiny")


def _window_rows(path) -> dict[int, int]:
    """Rows each window layer of a segment file holds."""
    file = segment_file.open_file(path)
    try:
        described = json.loads(file.meta["layers"])
        return {i: file.by_name[f"{i}.w.0"].shape[-2] for i, m in enumerate(described)
                if m["type"] == "RotatingKVCache"}
    finally:
        file.close()


def test_warm_resumed_and_cold_give_the_same_tokens(model, tmp_path):
    conv = make(model, tmp_path / "s.db")
    for q in QUESTIONS:
        last(conv.turns.send(q))
    rows = conv.store.segments.on_branch(conv.session.leaf_id)
    assert rows[0].end > WINDOW  # the first turn alone wraps the window
    for r in rows[1:]:  # a follow-up shorter than the window: its own rows only
        turn = r.end - r.start
        assert turn < WINDOW and set(_window_rows(paths.kv_file(r.path)).values()) == {turn}
    sid = conv.session.id
    conv.close(compact=False)
    src, dst = sqlite3.connect(tmp_path / "s.db"), sqlite3.connect(tmp_path / "c.db")
    src.backup(dst)  # the session as it is now, for the cold run
    src.close()
    dst.close()

    resumed = make(model, tmp_path / "s.db")
    resumed.open_session(sid)
    load = resumed.cache.last_load
    assert load.ok and load.reason is None and load.tokens == rows[-1].end
    again = last(resumed.turns.send(NEXT))
    assert again.stats.cache_source == "snapshot" and again.stats.reused_tokens == rows[-1].end
    resumed.close(compact=False)

    warm = warm_answer(model, tmp_path / "w.db", QUESTIONS, NEXT)
    for r in rows:  # the files gone: the history's token ledger is prefilled again
        paths.kv_file(r.path).unlink()
    cold = make(model, tmp_path / "c.db")
    cold.open_session(sid)
    assert cold.cache.last_load is None or not cold.cache.last_load.ok
    computed = last(cold.turns.send(NEXT))
    assert computed.stats.reused_tokens == 0
    cold.close(compact=False)
    assert computed.stats.prompt_tokens == again.stats.prompt_tokens
    assert again.token_ids == warm == computed.token_ids
