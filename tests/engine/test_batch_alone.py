"""A batch of one decodes on its engine's own thread, as plain decoding does
(no step of the batch's), token for token the reply alone; once another
engine wants to compute, it joins the batch mid-reply and both replies are
still what they are alone."""

from __future__ import annotations

import threading

from mlxchat.engine.batch.decoder import BatchDecoder
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TextDelta
from mlxchat.engine.thread.compute import ComputeLock
from mlxchat.generation import GenerationSettings
from tests.engine.test_batch import GREEDY, QUESTIONS, _alone, _ask, _done, _family
from tests.waiting import until

LONG = GenerationSettings(temperature=0.0, max_tokens=200)


def test_a_batch_of_one_decodes_alone_token_for_token_as_plain_decoding(tmp_path_factory):
    model = _family(tmp_path_factory, "llama3")
    (solo, solo_view), = _alone(model, QUESTIONS[:1])
    lock = ComputeLock()
    batch = BatchDecoder(model.model, size=4, compute=lock)
    engine = ChatEngine(model, compute=lock)
    engine.decode_in(batch)
    try:
        done = _done(engine, _ask(QUESTIONS[0]))
        view = engine.live_view()
    finally:
        engine.close()
        batch.close()
    assert done.token_ids == solo.token_ids and len(done.token_ids) > 1
    assert view.tokens == solo_view.tokens and view.length == solo_view.length
    # Every token but the first (sampled after the prompt) decoded on its own thread.
    assert batch.steps == 0 and batch.widest == 0
    assert batch.alone_steps == len(done.token_ids)


def test_a_member_alone_joins_the_batch_when_another_engine_waits(tmp_path_factory):
    model = _family(tmp_path_factory, "llama3")
    first_q, second_q = QUESTIONS[1], QUESTIONS[0]
    (first_solo, first_view), (second_solo, _) = (
        _alone(model, [first_q], LONG)[0], _alone(model, [second_q])[0])
    assert len(first_solo.token_ids) > 40  # long enough to be joined mid-reply
    lock = ComputeLock()
    batch = BatchDecoder(model.model, size=2, compute=lock)
    a, b = (ChatEngine(model, compute=lock, compute_owner=o) for o in ("a", "b"))
    for e in (a, b):
        e.decode_in(batch)
    got: dict = {}
    shown = threading.Event()

    def first() -> None:
        for event in a.turn(_ask(first_q), LONG):
            if isinstance(event, TextDelta) and event.generated_tokens > 10:
                shown.set()
            got.setdefault("a", []).append(event)
    try:
        ta = threading.Thread(target=first)
        ta.start()
        until(shown.is_set)
        alone_before = batch.alone_steps
        tb = threading.Thread(target=lambda: got.setdefault("b", _done(b, _ask(second_q))))
        tb.start()
        ta.join(60), tb.join(60)
        view = a.live_view()
    finally:
        a.close(), b.close(), batch.close()
    done_a = got["a"][-1]
    assert done_a.token_ids == first_solo.token_ids
    assert got["b"].token_ids == second_solo.token_ids
    assert view.tokens == first_view.tokens
    # It began alone and went on in the batch beside the newcomer.
    assert alone_before > 10 and batch.widest == 2 and batch.steps > 0
    assert batch.alone_steps < len(done_a.token_ids) + len(second_solo.token_ids)
