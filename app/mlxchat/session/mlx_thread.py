"""One long-lived thread for MLX work outside an engine (model loads, a GGUF
import, document embedding).

MLX streams belong to a thread, and MLX wants a thread's streams released by
that thread before it ends (``streams.release_thread_streams``); once released,
MLX on that thread fails ('There is no Stream(cpu, 0) in current thread').
Pooled threads (asyncio's default executor, which Textual's thread workers
use) are reused, so releasing on one breaks whatever MLX work lands there
next. Work goes to this thread instead; a pooled worker may wait on its
future. The thread releases its streams once, when stopped.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Callable, TypeVar

from mlxchat.errors import MlxchatError
from mlxchat.session.streams import release_thread_streams

T = TypeVar("T")

STOP_WAIT_S = 60.0
"""How long ``stop`` waits for the queued work (a model load) before returning;
the thread still finishes it and releases its streams before it ends."""


class MlxThreadStopped(MlxchatError):
    """Work was handed to an MLX thread that has been stopped."""


class MlxThread:
    """A thread, started at the first ``submit``, that runs the work handed to
    it one job at a time, in order, until ``stop``. Not a daemon: at exit the
    interpreter waits for it rather than killing it with its streams alive."""

    def __init__(self, name: str = "mlxchat-mlx"):
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue ``fn()`` after the work already queued; its future holds the
        result or the exception. MlxThreadStopped once stopped."""
        fut: Future[T] = Future()
        with self._lock:
            if self._stopped:
                raise MlxThreadStopped(f"The {self.name} thread has stopped: nothing more "
                                       "runs on it.")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name,
                                                daemon=False)
                self._thread.start()
            self._jobs.put((fn, fut))
        return fut

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the thread (at once when already on it), waited for."""
        if threading.current_thread() is self._thread:
            return fn()
        return self.submit(fn).result()

    def alive(self) -> bool:
        """Started and not yet ended."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, *, timeout: float = STOP_WAIT_S) -> None:
        """Refuse new work, let the queued work finish, release the thread's
        MLX streams on it and end it (waiting up to ``timeout``). Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            thread = self._thread
            if thread is not None:
                self._jobs.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                release_thread_streams()
                return
            fn, fut = job
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # handed to the waiting thread
                    fut.set_exception(exc)
