"""Replies decoded together in one batch are the replies decoded alone: the
same greedy tokens, the same cache afterwards, each with its own settings."""

from __future__ import annotations

import threading

import mlx.core as mx
import numpy as np
import pytest

from mlxchat.chat import Message
from mlxchat.engine.batch.caches import SPEC_OFF
from mlxchat.engine.batch.decoder import BatchDecoder
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.engine.thread.compute import ComputeLock
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder
from tests.families.builders import FAMILIES, write_family_model
from tests.waiting import until

GREEDY = GenerationSettings(temperature=0.0, max_tokens=64)
QUESTIONS = ("Say something about rivers.", "Count from one to nine, please, slowly.",
             "Why?")


def _family(tmp_path_factory, name: str):
    fam = next(f for f in FAMILIES if f.name == name)
    return load_folder(write_family_model(fam, tmp_path_factory.mktemp(name)))


@pytest.fixture(scope="module", params=["llama3", "gemma3", "qwen3_moe-r1"])
def family(request, tmp_path_factory):
    """A dense model, a sliding-window one (its window wraps in 64 tokens), a MoE."""
    return _family(tmp_path_factory, request.param)


def _ask(question: str) -> list[Message]:
    return [Message("user", question)]


def _done(engine: ChatEngine, messages, settings=GREEDY, **kw) -> TurnDone:
    done = [e for e in engine.turn(messages, settings, **kw) if isinstance(e, TurnDone)]
    return done[0]


def _alone(model, questions, settings=GREEDY):
    out = []
    for q in questions:
        engine = ChatEngine(model)
        try:
            out.append((_done(engine, _ask(q), settings), engine.live_view()))
        finally:
            engine.close()
    return out


def _together(model, questions, settings=GREEDY, *, turn_kw=()):
    """Every question's turn started at once while the lock is held, so all
    join the batch's first step; their ends and live views."""
    lock = ComputeLock()
    batch = BatchDecoder(model.model, size=len(questions), compute=lock)
    engines = [ChatEngine(model, compute=lock, compute_owner=f"m{i}")
               for i in range(len(questions))]
    for e in engines:
        e.decode_in(batch)
    results: list = [None] * len(questions)
    kws = list(turn_kw) or [{}] * len(questions)

    def go(i):
        results[i] = _done(engines[i], _ask(questions[i]), settings, **kws[i])
    held = lock.acquire("test")
    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(questions))]
    for t in threads:
        t.start()
    until(lambda: all(lock.ahead_of(f"m{i}") for i in range(len(questions))))
    lock.release(held)
    for t in threads:
        t.join(60)
    views = [e.live_view() for e in engines]
    for e in engines:
        e.close()
    batch.close()
    return results, views, batch


def test_greedy_replies_in_a_batch_are_token_for_token_the_ones_alone(family):
    alone = _alone(family, QUESTIONS)
    together, views, batch = _together(family, QUESTIONS)
    assert batch.widest == len(QUESTIONS)
    assert max(len(d.token_ids) for d in together) >= GREEDY.max_tokens
    for (solo, solo_view), done, view in zip(alone, together, views):
        assert done.token_ids == solo.token_ids
        assert done.stats.spec_off_reason == SPEC_OFF
        assert view.tokens == solo_view.tokens and view.length == solo_view.length


def test_a_member_leaves_with_its_cache_as_it_would_be_alone(tmp_path_factory):
    model = _family(tmp_path_factory, "llama3")
    short = GenerationSettings(temperature=0.0, max_tokens=5)
    (solo, solo_view), = _alone(model, QUESTIONS[:1], short)
    # The first to leave (5 tokens) beside one that goes on: run again with its own budget.
    lock = ComputeLock()
    batch = BatchDecoder(model.model, size=2, compute=lock)
    a, b = (ChatEngine(model, compute=lock, compute_owner=o) for o in ("a", "b"))
    for e in (a, b):
        e.decode_in(batch)
    got = {}
    ta = threading.Thread(target=lambda: got.setdefault("a", _done(a, _ask(QUESTIONS[0]),
                                                                   short)))
    tb = threading.Thread(target=lambda: got.setdefault("b", _done(b, _ask(QUESTIONS[1]))))
    held = lock.acquire("test")
    ta.start(), tb.start()
    until(lambda: lock.ahead_of("a") and lock.ahead_of("b"))
    lock.release(held)
    ta.join(60), tb.join(60)
    assert got["a"].token_ids == solo.token_ids
    assert got["b"].token_ids == _alone(model, QUESTIONS[1:2])[0][0].token_ids
    view = a.live_view()
    assert view.tokens == solo_view.tokens
    for mine, theirs in zip(view.layers, solo_view.layers):
        assert mine == theirs
    for mine, theirs in zip(view.cache(), solo_view.cache()):
        np.testing.assert_allclose(np.array(mine.keys.astype(mx.float32)),
                                   np.array(theirs.keys.astype(mx.float32)), atol=1e-5)
    for e in (a, b):
        e.close()
    batch.close()


def test_the_bundled_model_batched_is_token_for_token_the_model_alone(bundled_model):
    """Its decode path (float32 copies through the BLAS, rows <= 8) over 64
    greedy tokens, two conversations at once."""
    asks = ("What is a river delta?", "Name three kinds of clouds.")
    alone = _alone(bundled_model, asks)
    together, views, batch = _together(bundled_model, asks)
    assert batch.widest == 2
    for (solo, solo_view), done, view in zip(alone, together, views):
        assert done.token_ids == solo.token_ids
        assert view.tokens == solo_view.tokens
