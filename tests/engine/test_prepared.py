"""The engine's second cache, filled in idle time: what it writes and prefills
goes on where it stopped and comes out as one uninterrupted job would, a turn
between two of its jobs gives the reply it gives without them (the live cache
is never touched), and ``adopt`` hands it to the live cache only when it holds
more of the prompt."""

from __future__ import annotations

import threading

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.prompt.render import render

from .conftest import conversation, run
from tests.waiting import until

STOPS = [2]


def _prompt(tiny) -> list[int]:
    return render(tiny.tokenizer, [Message("system", "Summarize."),
                                   Message("user", "A long story about rivers " * 6)])


def test_writing_goes_on_where_it_stopped_and_a_turn_between_is_untouched(tiny):
    prompt = _prompt(tiny)
    whole = ChatEngine(tiny)
    reference = whole.prepared.write(prompt, max_tokens=24, stops=STOPS)
    assert reference.done and 0 < len(reference.ids) <= 24
    alone = run(whole.__class__(tiny), conversation(2))

    engine = ChatEngine(tiny)
    first = engine.prepared.write(prompt, max_tokens=5, stops=STOPS)
    assert first.ids == reference.ids[:5]
    between = run(engine, conversation(2))  # a turn between two jobs of the preparation
    assert between.token_ids == alone.token_ids and between.stats.cache_source == "cold"
    rest = engine.prepared.write(prompt, max_tokens=24, stops=STOPS)
    assert rest.ids == reference.ids and rest.done
    assert engine.prepared.held()[:len(prompt)] == prompt
    for e in (whole, engine):
        e.close()


def test_a_job_gives_way_to_work_queued_behind_it(tiny, monkeypatch):
    """Between two chunks the preparation sees other work waiting and stops,
    keeping what it prefilled; the next job goes on from there."""
    engine = ChatEngine(tiny, chunk_seconds=0.0)  # the smallest chunks
    tokens = _prompt(tiny) * 4
    queued: list = []
    record = engine._pipeline.chunks.record

    def after_a_chunk(*args) -> None:  # work arrives while the first chunk computes
        record(*args)
        if not queued:
            queued.append(engine._worker.later(lambda: None))
    monkeypatch.setattr(engine._pipeline.chunks, "record", after_a_chunk)
    held = engine.prepared.extend(tokens)
    assert 0 < held < len(tokens)  # it gave way after its first chunk
    queued[0].result(30)
    assert engine.prepared.held() == tokens[:held]
    assert engine.prepared.extend(tokens) == len(tokens)
    assert engine.prepared.held() == tokens
    # With other work already waiting, a job gives way before computing anything.
    gate, started = threading.Event(), threading.Event()
    engine._worker.later(lambda: (started.set(), gate.wait(30)))
    started.wait(30)
    got: list[int] = []
    worker = threading.Thread(target=lambda: got.append(engine.prepared.extend(tokens * 2)))
    worker.start()
    until(engine._worker.others_waiting)  # the preparation's job is in line
    behind = engine._worker.later(lambda: None)
    gate.set()
    worker.join(30)
    behind.result(30)
    assert got == [len(tokens)]
    engine.close()


def test_adopt_hands_over_only_a_longer_match(tiny):
    engine = ChatEngine(tiny)
    turn = run(engine, conversation(1))
    live = engine.cached_tokens
    other = _prompt(tiny)
    assert engine.prepared.extend(other) == len(other)
    # The live cache holds more of its own prompt: nothing is handed over.
    assert engine.prepared.adopt(live) == len(live) and engine.cached_tokens == live
    assert engine.prepared.held() == []  # dropped either way
    engine.prepared.extend(other)
    assert engine.prepared.adopt(other + [5, 6]) == len(other)
    assert engine.cached_tokens == other and turn.stats.generated_tokens > 0
    assert engine.state().cached_tokens == len(other)  # the gauges read the adopted cache
    engine.close()
