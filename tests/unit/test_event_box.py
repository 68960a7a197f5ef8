"""The hand-over of a turn's events between threads: every event arrives, in
order, whatever wake-ups were spared; a delta that came without one still
reaches a caller waiting for it; ``get(timeout=)`` says Empty as a queue does."""

from __future__ import annotations

import queue
import threading

import pytest

from mlxchat.engine.events import PrefillProgress, TextDelta
from mlxchat.engine.thread.handoff import EventBox
from tests.waiting import until


def test_every_event_arrives_in_order_from_another_thread():
    box = EventBox()
    sent = [PrefillProgress(1, 2), *(TextDelta(f"t{i}", i + 1) for i in range(200)), "end"]

    def produce() -> None:
        for item in sent:
            box.put(item)
    got: list = []
    producer = threading.Thread(target=produce)
    producer.start()
    while len(got) < len(sent):
        got.append(box.get(timeout=30))
    producer.join(30)
    assert got == sent


def test_a_delta_put_without_a_wake_up_reaches_a_waiting_caller():
    box = EventBox(wake_s=0.2)
    got: list = []

    def wait_for_three() -> None:
        for _ in range(3):
            got.append(box.get())
    waiter = threading.Thread(target=wait_for_three)
    waiter.start()
    until(lambda: box._waiting)
    box.put(TextDelta("a", 1))  # the first delta: wakes it
    until(lambda: got and box._waiting)
    box.put(TextDelta("b", 2))  # a delta right after a wake-up: no wake-up of its own
    box.put("done")  # not a delta: wakes it at once
    waiter.join(30)
    assert [getattr(x, "text", x) for x in got] == ["a", "b", "done"]
    box.put(TextDelta("c", 3))
    assert box.get(timeout=30).text == "c"  # a delta put while nobody waits is kept


def test_get_with_a_timeout_says_empty():
    with pytest.raises(queue.Empty):
        EventBox().get(timeout=0.01)
