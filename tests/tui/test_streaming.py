"""Batching of a turn's events (no Textual, no model)."""

from mlxchat.engine.events import PrefillProgress, TextDelta, TurnDone
from mlxchat.tui.streaming import Pacer, pump_turn
from mlxchat.turn_stats import TurnStats


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def events(clock: Clock, closed: list[bool]):
    try:
        yield PrefillProgress(0, 100)
        clock.now += 0.01
        yield PrefillProgress(50, 100, 5000.0)
        yield PrefillProgress(100, 100, 5000.0)
        for i in range(10):
            clock.now += 0.02  # a token every 20 ms
            yield TextDelta(f"t{i} ", i + 1, 50.0)
        yield TurnDone("reply", TurnStats(generated_tokens=10))
    finally:
        closed.append(True)


def test_text_is_batched_and_progress_throttled():
    clock, closed = Clock(), []
    texts, prefills = [], []
    done = pump_turn(events(clock, closed), on_text=texts.append, on_prefill=prefills.append,
                     interval=0.05, clock=clock)
    assert done is not None and done.reply == "reply"
    assert "".join(b.text for b in texts) == "".join(f"t{i} " for i in range(10))
    assert len(texts) == 4  # at 20 ms a token and a 50 ms interval: ~3 tokens a batch
    assert texts[-1].generated_tokens == 10 and texts[-1].decode_tps == 50.0
    # The first update and the last (100%) always show; the ones between are throttled.
    assert [(p.done, p.total) for p in prefills] == [(0, 100), (100, 100)]
    assert closed == [True]


def test_stop_closes_the_events_which_cancels_the_turn():
    clock, closed = Clock(), []
    seen = []
    done = pump_turn(events(clock, closed), on_text=seen.append, on_prefill=lambda p: None,
                     stop=lambda: len(seen) > 0, interval=0.0, clock=clock)
    assert done is None and closed == [True]
    assert [b.text for b in seen] == ["t0 "]


def test_pacer_keeps_drawing_near_its_share_of_the_ui_thread():
    clock = Clock()
    pacer = Pacer(share=0.05, floor=0.05, ceiling=0.25, clock=clock)
    assert pacer() == 0.05
    cpu = 0.0
    for _ in range(20):  # each update costs 10 ms of the UI thread
        clock.now += pacer()
        cpu += 0.010
        pacer.record(cpu)
    assert abs(pacer() - 0.2) < 0.01  # 10 ms every 200 ms is 5%
    for _ in range(20):  # cheap updates: back to the floor
        clock.now += pacer()
        cpu += 0.001
        pacer.record(cpu)
    assert pacer() < 0.051
    for _ in range(20):  # very costly ones: never slower than the ceiling
        clock.now += pacer()
        cpu += 0.1
        pacer.record(cpu)
    assert pacer() <= 0.25


def test_a_costly_update_is_paid_back_over_the_turn():
    clock = Clock()
    pacer = Pacer(share=0.05, floor=0.05, ceiling=1.0, clock=clock)
    cpu = 0.0
    pacer.record(cpu)  # the turn's first update opens the account
    start = clock.now
    costs = [0.040] + [0.005] * 30  # mounting the first paragraph, then cheap ones
    intervals = []
    for cost in costs:
        clock.now += pacer()
        cpu += cost
        pacer.record(cpu)
        intervals.append(pacer())
        # Never more than the share, give or take one update's worth.
        assert cpu <= 0.05 * (clock.now - start) + cost + 1e-9
    assert intervals[0] > 0.5  # just after the costly one the next update waited...
    # ...and once it is paid back, 5 ms updates come 100 ms apart (5%).
    assert abs(intervals[-1] - 0.1) < 0.01
    assert abs(cpu / (clock.now - start) - 0.05) < 0.01


def test_a_batch_holds_one_part():
    clock = Clock()

    def parts():
        for i in range(6):
            clock.now += 0.001  # faster than the interval: everything would batch together
            yield TextDelta(f"r{i}" if i < 4 else f"a{i}", i + 1, 10.0,
                            part="reasoning" if i < 4 else "answer")
        yield TurnDone("a4a5", TurnStats(generated_tokens=6, reasoning_tokens=4))
    texts = []
    pump_turn(parts(), on_text=texts.append, on_prefill=lambda p: None, interval=1.0,
              clock=clock)
    assert [(b.part, b.text) for b in texts] == [
        ("reasoning", "r0"), ("reasoning", "r1r2r3"), ("answer", "a4a5")]


def test_a_new_turn_starts_at_the_learned_interval():
    clock = Clock()
    pacer = Pacer(share=0.05, floor=0.05, ceiling=0.5, clock=clock)
    cpu = 0.0
    for _ in range(20):  # each update costs 10 ms of the UI thread: 200 ms apart
        clock.now += pacer()
        cpu += 0.010
        pacer.record(cpu)
    learned = pacer()
    pacer.restart()
    assert pacer() == learned  # the next turn's first updates are paced already
    clock.now += 30.0  # between turns the UI thread did other work
    cpu += 1.0
    pacer.record(cpu)  # the first update of the new turn: no cost to learn from yet
    assert pacer() == learned
