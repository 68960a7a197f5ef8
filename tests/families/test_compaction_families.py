"""Compaction on the families whose caches cannot be trimmed back: Gemma 3's
sliding window (wrapped long before the window fills) and Qwen3-Next's
recurrent layers. The switch prefills only the new message, a resumed session
answers as the warm one did, and /compact undo comes back exactly from disk."""

from __future__ import annotations

import pytest

from mlxchat.models import load_folder

from tests.families.builders import FAMILIES, write_family_model
from tests.session.compacting import fill, last, make, question, until_switch


@pytest.fixture(scope="module", params=["gemma3", "qwen3_next"])
def family_model(request, tmp_path_factory):
    family = next(f for f in FAMILIES if f.name == request.param)
    return load_folder(write_family_model(family, tmp_path_factory.mktemp(request.param)),
                       name="tiny", spec="tiny")


def test_the_switch_and_a_resume_on_caches_that_cannot_be_trimmed(family_model, tmp_path):
    conv = make(family_model, tmp_path / "s.db")
    done, nxt = until_switch(conv)
    assert done.stats.compaction.endswith("(prepared ahead)")
    assert done.stats.prefilled_tokens == len(conv.messages[-2].token_ids)
    warm = last(conv.turns.send(question(nxt)))
    conv.turns.undo()
    sid = conv.session.id
    conv.close(compact=False)
    again = make(family_model, tmp_path / "s.db", ahead=False)
    again.open_session(sid)
    resumed = last(again.turns.send(question(nxt)))
    assert resumed.stats.cache_source == "snapshot" and resumed.stats.miss_reason is None
    assert resumed.token_ids == warm.token_ids
    again.close(compact=False)


def test_undo_is_exact_on_caches_that_cannot_be_trimmed(family_model, tmp_path):
    conv = make(family_model, tmp_path / "s.db", policy="drop_oldest")
    fill(conv, 5)
    source, _ = conv.fork()
    reference = last(conv.turns.send("And one more thing?"))
    conv.open_session(source.id)
    conv.compactor.compact()
    conv.compactor.undo()
    after = last(conv.turns.send("And one more thing?"))
    assert after.stats.cache_source == "snapshot" and after.stats.miss_reason is None
    assert after.token_ids == reference.token_ids
    conv.close(compact=False)
