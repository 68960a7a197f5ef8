"""The engine's one thread: every MLX call of an engine runs on it (MLX streams
are per thread), one job at a time, in the order they were queued, each
holding the process's compute lock (``compute.py``) while it runs but
bookkeeping (``Bookkeeping``). Cancelled work that waits for the lock leaves
its line at once: its future fails with ``WaitCancelled``; so does work a
thread asks for inside ``waits_end_on(cancel)`` once that is set."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import mlx.core as mx

from mlxchat.engine.events import EngineError
from mlxchat.engine.thread.compute import PROCESS_LOCK, CancelSignal, ComputeLock, Ticket

_scope = threading.local()


@contextmanager
def waits_end_on(cancel: threading.Event) -> Iterator[None]:
    """Engine work this thread asks for meanwhile (any engine's) waits for the
    compute lock only until ``cancel`` is set, then fails with WaitCancelled:
    an API request's setup (restoring its branch) whose client went away while
    the chat's engine computes."""
    outer = getattr(_scope, "cancel", None)
    _scope.cancel = cancel if outer is None else _Either(cancel, outer)
    try:
        yield
    finally:
        _scope.cancel = outer


class _Either:
    """Set once either signal is."""

    __slots__ = ("first", "second")

    def __init__(self, first: CancelSignal, second: CancelSignal):
        self.first, self.second = first, second

    def is_set(self) -> bool:
        return self.first.is_set() or self.second.is_set()


class EngineClosed(EngineError):
    """Work asked of an engine that was closed (a load that ended after quitting)."""


class Bookkeeping:
    """A job that reads the engine's state and computes nothing with MLX: it
    runs in queue order without the compute lock (never waits behind another
    engine's turn)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn

    def __call__(self) -> Any:
        return self.fn()


class EngineThread:
    """A thread, its job queue, and the cancel signals of queued and running
    work: ``cancel_all`` sets them all, ``cancelled`` reads the running one's."""

    def __init__(self, name: str = "mlxchat-engine", *, owner: str = "chat",
                 compute: ComputeLock = PROCESS_LOCK):
        self.owner = owner
        """Whose jobs these are, as the compute lock's line shows them ('chat', 'api')."""
        self.compute = compute
        self._ticket: Ticket | None = None
        self._jobs: queue.Queue = queue.Queue()
        self._cancels: set[threading.Event] = set()
        self._current = threading.Event()
        self._closing = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                # MLX aborts the process at exit if a thread's streams outlive it.
                mx.synchronize()
                mx.clear_streams()
                return  # nothing is queued behind it: ``later`` refuses once closed
            fn, fut, cancel = job
            if fut.set_running_or_notify_cancel():
                try:
                    if isinstance(fn, Bookkeeping):
                        result = fn()
                    else:
                        with self.compute.held(self.owner, cancel=cancel) as self._ticket:
                            result = fn()
                    fut.set_result(result)
                except BaseException as exc:  # handed to the caller's thread
                    fut.set_exception(exc)
                finally:
                    self._ticket = None

    def pass_on(self, *, cancellable: bool = True) -> None:
        """On the thread, between chunks of work that may wait: let the engines
        waiting for the compute lock go first. The running work's cancel (a
        turn, a stop, closing) ends the wait (WaitCancelled) unless not
        ``cancellable`` (the wait is one short step: the work then settles)."""
        if self._ticket is not None:
            self.compute.pass_on(self._ticket,
                                 cancel=self._current if cancellable else None)

    def alone(self) -> bool:
        """On the thread: its work holds the compute lock and nobody (another
        engine, a batch) waits for it."""
        return self._ticket is not None and not self.compute.awaited()

    @contextmanager
    def lent(self) -> Iterator[None]:
        """On the thread: out of the compute lock's line meanwhile (the work
        waits on another thread's compute), back in it after."""
        ticket = self._ticket
        if ticket is None:
            yield
            return
        self.compute.step_out(ticket)
        try:
            yield
        finally:
            self.compute.step_in(ticket)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the thread (at once when already on it), its result or exception."""
        if threading.current_thread() is self._thread:
            return fn()
        return self.later(fn).result()

    def later(self, fn: Callable[[], Any], cancel: threading.Event | None = None) -> Future:
        """Queue ``fn`` after the jobs already queued, without waiting for it;
        ``cancel`` set while it waits for the compute lock: it never runs."""
        fut: Future = Future()
        scoped = getattr(_scope, "cancel", None)
        signal: CancelSignal | None = cancel
        if scoped is not None:
            signal = scoped if cancel is None else _Either(cancel, scoped)
        with self._closing:
            if self._closed:
                raise EngineClosed("the engine was closed")
            self._jobs.put((fn, fut, signal))
        return fut

    def submit(self, fn: Callable[[], Any], cancel: threading.Event) -> Future:
        """Queue ``fn`` as the work ``cancel`` stops: while it runs, ``cancelled()``
        reads ``cancel``, and ``cancel_all()`` sets it until it is done."""
        self._cancels.add(cancel)

        def job() -> Any:
            self._current = cancel
            return fn()
        fut = self.later(job, cancel)
        fut.add_done_callback(lambda _: self._cancels.discard(cancel))
        return fut

    def others_waiting(self) -> bool:
        """Other work is queued behind the running job (idle work gives way to it)."""
        return not self._jobs.empty()

    def cancelled(self) -> bool:
        """The running work was cancelled (read on the thread, between chunks and tokens)."""
        return self._current.is_set()

    def cancel_all(self) -> None:
        """Stop the running (and any queued) work within about one token or chunk."""
        for ev in list(self._cancels):
            ev.set()

    def close(self) -> None:
        """Cancel the work and stop the thread once the queued jobs are done."""
        with self._closing:
            if self._closed:
                return
            self._closed = True  # later work is refused, never left waiting
            if self._thread.is_alive():
                self.cancel_all()
                self._jobs.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

