"""The engine lane: first come first served, bounded, cancellable."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mlxchat.server.core.lane import _END, EngineLane, Job, QueueFull


async def test_jobs_run_in_order_a_full_queue_refuses_and_a_waiting_job_can_leave():
    release = threading.Event()
    ran: list[str] = []
    stopped: list[bool] = []

    def work(name: str, *, block: bool = False):
        def run(cancelled: threading.Event):
            ran.append(name)
            if block:
                release.wait(10)
            yield name
        return run

    lane = EngineLane(stop_running=lambda: stopped.append(True), max_waiting=2)
    try:
        first = lane.submit(work("first", block=True))
        while not ran:  # running, so it no longer waits
            await asyncio.sleep(0.01)
        second = lane.submit(work("second"))
        leaving = lane.submit(work("leaving"))
        with pytest.raises(QueueFull) as full:
            lane.submit(work("third"))
        assert full.value.retry_after_s >= 1
        lane.cancel(leaving)  # waiting: it never starts
        assert lane.waiting == 1 and not stopped
        lane.cancel(first)  # running: the engine is told to stop
        assert stopped == [True]
        release.set()
        assert [x async for x in first.items()] == ["first"]
        assert [x async for x in second.items()] == ["second"]
        assert [x async for x in leaving.items()] == []
        assert ran == ["first", "second"]
    finally:
        lane.close()


async def test_an_error_in_the_work_reaches_the_request():
    def failing(cancelled):
        yield 1
        raise ValueError("temperature must be >= 0")

    lane = EngineLane(stop_running=lambda: None)
    try:
        job = lane.submit(failing)
        got = []
        with pytest.raises(ValueError, match="temperature"):
            async for item in job.items():
                got.append(item)
        assert got == [1]
    finally:
        lane.close()


async def test_pieces_that_follow_soon_go_out_together_and_the_end_at_once():
    """After the loop took a piece, the next ones wait (up to ``coalesce_s``,
    here far longer than the test) to go out as one; the end wakes it at once."""
    job = Job(lambda cancelled: iter(()), asyncio.get_running_loop(), coalesce_s=600)
    items = job.items(merge=lambda a, b: a + b if isinstance(a, str) and isinstance(b, str)
                      else None)
    job.put("a")
    assert await asyncio.wait_for(anext(items), 10) == "a"  # the first: at once
    job.put("b")
    job.put("c")
    await asyncio.sleep(0.05)  # the loop runs on: nothing is handed over yet
    assert not job._ready.is_set()
    job.put(_END)

    async def rest() -> list[str]:
        return [x async for x in items]
    assert await asyncio.wait_for(rest(), 10) == ["bc"]  # one piece, and the end


async def test_the_queue_is_fair_across_conversations():
    """One conversation's requests, queued while its long reply streams, go
    after the others' that arrived later; each conversation then in turn."""
    release = threading.Event()
    ran: list[str] = []

    def work(name: str, *, block: bool = False):
        def run(cancelled: threading.Event):
            ran.append(name)
            if block:
                release.wait(10)
            yield name
        return run

    lane = EngineLane(stop_running=lambda: None, max_waiting=8)
    try:
        jobs = [lane.submit(work("a1", block=True), key="a")]
        while not ran:
            await asyncio.sleep(0.01)
        for name in ("a2", "a3", "b1", "c1", "b2"):
            jobs.append(lane.submit(work(name), key=name[0]))
        with pytest.raises(QueueFull):  # a conversation holds half the places at most
            for n in range(4, 8):
                jobs.append(lane.submit(work(f"a{n}"), key="a"))
        release.set()
        for job in jobs:
            assert [x async for x in job.items()]
        assert ran == ["a1", "b1", "c1", "a2", "b2", "a3", "a4", "a5"]
    finally:
        lane.close()


async def test_idle_work_runs_only_while_no_request_waits_and_stops_for_one():
    ran: list[str] = []
    in_idle, go = threading.Event(), threading.Event()

    def idle(arrived) -> float | None:
        ran.append("idle")
        in_idle.set()
        go.wait(10)
        ran.append(f"idle saw a request: {arrived()}")
        return None

    def work(cancelled):
        ran.append("request")
        yield 1

    lane = EngineLane(stop_running=lambda: None, when_idle=idle)
    try:
        lane.idle_work_in(0)
        assert in_idle.wait(10)
        job = lane.submit(work)  # arrives while the idle work runs: it waits
        go.set()
        assert [x async for x in job.items()] == [1]
        assert ran == ["idle", "idle saw a request: True", "request"]
    finally:
        lane.close()
