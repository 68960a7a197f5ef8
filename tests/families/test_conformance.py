"""The model-family conformance matrix: on each family's architecture and a
template that behaves like its real one, five turns where every follow-up
prefills only its new message, replies token-identical warm / resumed in a
new engine / cold, an edit of turn 2 and a retry; nothing crashes."""

from __future__ import annotations

from functools import partial

import pytest
from mlx_lm.models.cache import can_trim_prompt_cache

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder
from mlxchat.session.conversation import Conversation
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store

from .builders import FAMILIES, Family, write_family_model

QUESTIONS = ("Hello there, here is my first question.", "And a second one?",
             "Third: tell me more.", "Fourth, please.", "Fifth and last question.")
GREEDY = GenerationSettings(temperature=0.0, max_tokens=6, max_reasoning_tokens=6)


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda f: f.name)
def family(request, tmp_path_factory):
    fam: Family = request.param
    return fam, load_folder(write_family_model(fam, tmp_path_factory.mktemp(fam.name)))


def opener(loaded, db, fam: Family, **kw):
    settings = Settings(model="tiny", system_prompt=fam.system, generation=GREEDY)
    return partial(open_conversation, settings, store_factory=lambda: open_store(db),
                   load_model=lambda spec, progress=None: loaded, **kw)


def ask(conv: Conversation, text: str) -> TurnDone:
    done = [e for e in conv.turns.send(text) if isinstance(e, TurnDone)]
    return done[0]


def answer_again(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][0]


def new_ids(conv: Conversation) -> int:
    """Tokens the last user message added to the ledger."""
    user = [m for m in conv.messages if m.role == "user"][-1]
    assert user.token_ids is not None
    return len(user.token_ids)


def test_five_turns_warm_resumed_and_cold_agree(family, tmp_path):
    fam, loaded = family
    warm = opener(loaded, tmp_path / "warm.db", fam)().conversation
    replies = []
    for k, q in enumerate(QUESTIONS):
        done = ask(warm, q)
        replies.append(done.token_ids)
        assert done.stats.finish_reason in ("stop", "length")
        if k:
            # A follow-up pays only for its own message (and the template's few tokens).
            assert done.stats.cache_source == "warm" and done.stats.miss_reason is None
            assert done.stats.prefilled_tokens == new_ids(warm), (k, done.stats)
    warm.shutdown()

    # Each turn in a new engine that resumes the session from its snapshot.
    db = tmp_path / "resumed.db"
    for k, q in enumerate(QUESTIONS):
        conv = opener(loaded, db, fam, continue_last=True)().conversation
        done = ask(conv, q)
        assert done.token_ids == replies[k], f"turn {k + 1} differs after a resume"
        if k:
            assert done.stats.cache_source == "snapshot" and done.stats.miss_reason is None
            assert done.stats.prefilled_tokens == new_ids(conv)
        conv.shutdown()

    # Each turn cold: a new engine and no snapshot, so the whole ledger is prefilled.
    db = tmp_path / "cold.db"
    for k, q in enumerate(QUESTIONS):
        conv = opener(loaded, db, fam, continue_last=True, keep_snapshots=False)().conversation
        done = ask(conv, q)
        assert done.stats.reused_tokens == 0
        assert done.token_ids == replies[k], f"turn {k + 1} differs when cold"
        conv.shutdown()


def test_edit_of_turn_two_and_a_retry(family, tmp_path):
    fam, loaded = family
    conv = opener(loaded, tmp_path / "s.db", fam)().conversation
    for q in QUESTIONS:
        ask(conv, q)
    first_reply = conv.messages[1]
    assert first_reply.role == "assistant"
    view = conv.engine.live_view()
    trimmable = can_trim_prompt_cache(view.cache())
    assert trimmable == view.trimmable
    conv.store.branches.set_leaf(conv.session.id, first_reply.id)  # step back to after turn 1
    conv.reload()
    edited = ask(conv, "A different second question.")
    # Back to the end of turn 1 without recomputing it: at most the new message
    # is prefilled. A trimmable cache is trimmed in memory; a wrapped sliding
    # window or a recurrent state is restored from turn 1's segment on disk.
    assert edited.stats.reused_tokens >= edited.stats.prompt_tokens - new_ids(conv)
    if trimmable:
        assert edited.stats.miss_reason.startswith("history edited at message")
    else:
        assert edited.stats.cache_source == "snapshot" and edited.stats.miss_reason is None
    retried = answer_again(conv.turns.retry())
    assert retried.token_ids == edited.token_ids  # greedy: the same answer again
    conv.shutdown()
    # The same branch answered by a fresh engine from nothing agrees.
    cold = Conversation(settings=Settings(system_prompt=fam.system, generation=GREEDY),
                        store=open_store(tmp_path / "s.db"), engine=ChatEngine(loaded),
                        model_spec="tiny", session=None, keep_snapshots=False)
    cold.open_session(conv.session.id)
    cold.engine.drop_cache()
    again = answer_again(cold.turns.retry())
    assert again.token_ids == edited.token_ids
    # The retried reply extends the token ledger: the next turn reuses all of it
    # (it was stored without its ids, and a window or recurrent state went cold).
    held = cold.views.state().cached_tokens
    follow = ask(cold, "And after the retry?")
    assert cold.messages[-3].token_ids is not None
    assert (follow.stats.reused_tokens, follow.stats.miss_reason) == (held, None)
    cold.shutdown()


RERENDERING = ("mistral", "qwen3_moe-r1", "gpt_oss")
"""Families whose template renders history differently from what was sent."""


@pytest.fixture(scope="module")
def models_by_name(tmp_path_factory):
    made: dict[str, tuple[Family, object]] = {}

    def get(name: str):
        if name not in made:
            fam = next(f for f in FAMILIES if f.name == name)
            made[name] = fam, load_folder(write_family_model(fam, tmp_path_factory.mktemp(name)))
        return made[name]
    return get


@pytest.mark.parametrize("mode", ["template", "ledger"])
@pytest.mark.parametrize("name", RERENDERING)
def test_rerendering_history_misses_where_the_ledger_does_not(models_by_name, tmp_path,
                                                               name, mode):
    fam, loaded = models_by_name(name)
    settings = Settings(system_prompt=fam.system,
                        generation=GenerationSettings(temperature=0.0, max_tokens=6,
                                                      history=mode))
    conv = open_conversation(settings, store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: loaded).conversation
    first = ask(conv, QUESTIONS[0])
    second = ask(conv, QUESTIONS[1])
    if mode == "ledger":
        assert second.stats.miss_reason is None
        assert second.stats.reused_tokens == first.stats.context_used
    else:  # the old way: the cache no longer matches the re-rendered history
        assert second.stats.miss_reason is not None
        assert second.stats.reused_tokens < first.stats.prompt_tokens
    conv.shutdown()


def test_context_says_when_the_ledger_differs_from_the_template(models_by_name, tmp_path):
    fam, loaded = models_by_name("gpt_oss")  # history renders a channel the cache never had
    settings = Settings(system_prompt=fam.system, generation=GREEDY)
    conv = open_conversation(settings, store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: loaded).conversation
    assert conv.views.ledger_note() is None  # nothing sent yet
    ask(conv, QUESTIONS[0])
    ask(conv, QUESTIONS[1])
    note = conv.views.ledger_note()
    assert note and "/set history template" in note
    conv.shutdown()


def test_the_cache_dtype_is_known_before_the_first_token(family, tmp_path):
    """The KV gauge names the cache's float type from the start, not 'native'
    until the first chunk lands: the empty cache's label is the one the
    cache has once it holds the first turn."""
    fam, loaded = family
    conv = opener(loaded, tmp_path / "s.db", fam)().conversation
    before = conv.views.state().kv_dtype
    ask(conv, QUESTIONS[0])
    assert before in ("fp16", "bf16", "fp32")
    assert conv.views.state().kv_dtype == before
    conv.shutdown()
