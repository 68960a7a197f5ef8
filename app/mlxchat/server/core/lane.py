"""One engine, one lane: requests run one at a time on a thread of their own,
with a bounded number waiting, fair across conversations: the next to run is
the first waiting of the conversation that started a request least recently
(so one client sending request after request, or streaming long replies,
cannot keep the others waiting), and one conversation may hold at most half
the waiting places. A request whose client
went away is cancelled: waiting, it never starts; running, its generation
stops within one decode step (the engine's cancel) and what it said is kept.
With ``parallel`` slots, as many jobs run at once, each on its slot's
thread (``on_slot(i)`` first: the slot's conversation and engine), never two
of one conversation, the fairest first as above; ``admits(running)`` (how
many run now) may hold the next back (memory: it waits for one to end).
When no request waits, the lane runs its idle work (the idle join of KV
files), which stops at its next safe point once a request arrives.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Hashable, Iterator

log = logging.getLogger(__name__)

Work = Callable[[threading.Event], Iterator[Any]]
"""Run on the lane's thread with the job's cancel flag; what it yields
reaches the request's handler."""

IdleWork = Callable[[Callable[[], bool]], "float | None"]
"""Run on the lane's thread when no request waits, given ``arrived`` (True
once a request waits or the lane closes: stop at the next safe point);
returns the seconds until it wants to run again (None: when asked)."""

_END = object()
_IDLE = object()


class QueueFull(Exception):
    def __init__(self, retry_after_s: int):
        super().__init__(f"{retry_after_s}")
        self.retry_after_s = retry_after_s


COALESCE_S = 0.02
"""After the loop took items, what comes within this long waits to go out with
the next ones (one chunk, one write, one parse by the client instead of one
per token); the first item and the end go at once."""


class Job:
    """A request's place in the lane, and the items its work yielded.

    Items wait in a plain deque; the event loop is woken once for all that
    arrive before it looks, not once per token (each wake-up is a write to
    the loop's pipe and a pass of the loop, taken from the decode's cores),
    and not sooner than ``COALESCE_S`` after it last took some, but at once
    for the end."""

    def __init__(self, work: Work, loop: asyncio.AbstractEventLoop, *,
                 coalesce_s: float = COALESCE_S, key: Hashable = None):
        self.work = work
        self.key = key
        """The conversation it belongs to (None: one shared by all keyless jobs)."""
        self.cancelled = threading.Event()
        self._loop = loop
        self._pending: deque[Any] = deque()
        self._lock = threading.Lock()
        self._woken = False
        self._wake_at = 0.0
        """When the pending wake-up comes (0: at once)."""
        self._taken_at = -coalesce_s
        self._coalesce_s = coalesce_s
        self._ready = asyncio.Event()

    def put(self, item: Any) -> None:
        last = item is _END or isinstance(item, BaseException)
        with self._lock:
            self._pending.append(item)
            if self._woken and not (last and self._wake_at):
                return  # the loop has a wake-up coming in time; it takes this item too
            self._woken = True
            delay = 0.0 if last else self._taken_at + self._coalesce_s - time.monotonic()
            self._wake_at = time.monotonic() + delay if delay > 0 else 0.0
        try:
            if delay > 0:
                self._loop.call_soon_threadsafe(self._loop.call_later, delay, self._ready.set)
            else:
                self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the event loop is closed: nobody is listening
            pass

    def _take(self) -> list[Any]:
        with self._lock:
            taken, self._woken, self._wake_at = list(self._pending), False, 0.0
            self._pending.clear()
            self._ready.clear()
            self._taken_at = time.monotonic()
        return taken

    async def items(self, merge: Callable[[Any, Any], Any] | None = None) -> Any:
        """What the work yields, in order; an exception it raised is raised here.
        ``merge(a, b)``: one item for two that arrived together (None: keep both)."""
        while True:
            await self._ready.wait()
            batch = self._take()
            if not batch:
                continue  # a delayed wake-up after an early one took its items
            for item in _merged(batch, merge) if merge else batch:
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item


def _merged(batch: list[Any], merge: Callable[[Any, Any], Any]) -> list[Any]:
    out: list[Any] = []
    for item in batch:
        joined = merge(out[-1], item) if out else None
        if joined is None:
            out.append(item)
        else:
            out[-1] = joined
    return out


KEYS_KEPT = 4096
"""Conversations whose last start the lane remembers (the oldest are forgotten)."""


class EngineLane:
    """A queue of jobs run on one thread, fair across their keys; ``cancel``
    calls ``stop_running`` (the engine's cancel) only while that job runs."""

    def __init__(self, *, stop_running: Callable[..., None], max_waiting: int = 8,
                 when_idle: IdleWork | None = None, parallel: int = 1,
                 on_slot: Callable[[int], None] = lambda slot: None,
                 admits: Callable[[int], bool] = lambda running: True):
        """``stop_running(slot)`` with ``parallel`` > 1, else ``stop_running()``."""
        self.max_waiting, self.parallel = max_waiting, parallel
        self._stop_running = stop_running if parallel > 1 else lambda slot: stop_running()
        self._on_slot, self._admits = on_slot, admits
        self._when_idle = when_idle
        self._idle_at: float | None = None
        """When the idle work asked to run next (monotonic; None: not asked)."""
        self._waiting: deque[Job] = deque()
        self._running: dict[int, Job] = {}
        """Slot -> the job it runs."""
        self._started: dict[Hashable, int] = {}
        """Key -> the number of the last job of it started (a key not here: never)."""
        self._starts = 0
        self._lock = threading.Condition()
        self._closed = False
        self.turn_seconds = 1.0
        """How long a job took lately (a guess at Retry-After)."""
        self._threads = [threading.Thread(target=self._run, args=(slot,), daemon=True,
                                          name=f"mlxchat-api-lane-{slot}")
                         for slot in range(parallel)]
        for thread in self._threads:
            thread.start()

    def submit(self, work: Work, *, key: Hashable = None) -> Job:
        """Queue ``work`` of conversation ``key``; raises QueueFull when
        ``max_waiting`` jobs wait already, or half as many of ``key`` (None:
        no conversation known, not capped)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            own = 0 if key is None else sum(1 for j in self._waiting if j.key == key)
            if (self._closed or len(self._waiting) >= self.max_waiting
                    or own >= max(1, self.max_waiting // 2)):
                ahead = len(self._waiting) + len(self._running)
                raise QueueFull(max(1, round(self.turn_seconds * ahead)))
            job = Job(work, loop, key=key)
            self._waiting.append(job)
            self._lock.notify()
        return job

    def cancel(self, job: Job) -> None:
        with self._lock:
            job.cancelled.set()
            if job in self._waiting:
                self._waiting.remove(job)
                job.put(_END)
            else:
                for slot, running in self._running.items():
                    if running is job:
                        self._stop_running(slot)

    def idle_work_in(self, seconds: float) -> None:
        """Run the idle work once ``seconds`` have passed with no request waiting."""
        with self._lock:
            at = time.monotonic() + seconds
            self._idle_at = at if self._idle_at is None else min(self._idle_at, at)
            self._lock.notify()

    def _arrived(self) -> bool:
        with self._lock:
            return bool(self._waiting) or self._closed

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    @property
    def running(self) -> int:
        """Jobs running now (at most ``parallel``)."""
        with self._lock:
            return len(self._running)

    def close(self, timeout_s: float = 10.0) -> None:
        """Refuse new jobs, cancel the running one, finish the thread."""
        with self._lock:
            self._closed = True
            for job in self._waiting:
                job.cancelled.set()
                job.put(_END)
            self._waiting.clear()
            for slot in self._running:
                self._stop_running(slot)
            self._lock.notify_all()
        for thread in self._threads:
            thread.join(timeout_s)

    def _next(self, slot: int) -> Job | object | None:
        """The next job to run, ``_IDLE`` for the idle work, None once closed."""
        with self._lock:
            while True:
                job = self._fairest()
                if job is not None:
                    self._running[slot] = job
                    return job
                if self._closed:
                    return None
                now, at = time.monotonic(), self._idle_at
                if (at is not None and at <= now and self._when_idle is not None
                        and not self._running):
                    self._idle_at = None
                    return _IDLE
                self._lock.wait(None if at is None else at - now)

    def _fairest(self) -> Job | None:
        """Take the first waiting job of the key that started least recently
        (None: none may start now)."""
        busy = {j.key for j in self._running.values()}
        free = [j for j in self._waiting if j.key not in busy]
        if not free or (self._running and not self._admits(len(self._running))):
            return None
        job = min(free, key=lambda j: self._started.get(j.key, -1))
        self._waiting.remove(job)  # min keeps the first of equals: arrival order
        self._starts += 1
        self._started.pop(job.key, None)
        self._started[job.key] = self._starts
        if len(self._started) > KEYS_KEPT:  # insertion order: the oldest start first
            del self._started[next(iter(self._started))]
        return job

    def _idle(self) -> None:
        assert self._when_idle is not None
        try:
            again = self._when_idle(self._arrived)
        except Exception:  # noqa: BLE001 - idle work never stops the lane
            log.exception("the lane's idle work failed")
            again = None
        if again is not None:
            self.idle_work_in(again)

    def _run(self, slot: int) -> None:
        self._on_slot(slot)
        while True:
            job = self._next(slot)
            if job is None:
                return
            if not isinstance(job, Job):
                self._idle()
                continue
            began = time.monotonic()
            try:
                for item in job.work(job.cancelled):
                    job.put(item)
            except BaseException as exc:  # noqa: BLE001 - handed to the request's handler
                job.put(exc)
            finally:
                with self._lock:
                    del self._running[slot]
                    self._lock.notify_all()  # a job of its key, or one held back, may start
                job.put(_END)
                self.turn_seconds = 0.5 * self.turn_seconds + 0.5 * (time.monotonic() - began)
