"""A turn's events handed from the engine thread to the caller's.

Waking the caller is the costly part of a hand-over (on a busy machine the
woken thread takes the engine thread's core): the caller is woken at once
for an event that is not a text delta and for the first delta after one,
and for the others every ``EVERY`` deltas or ``WAKE_S``, whichever comes
first (a caller that stops the turn on what it read still stops it within
about a token); a caller woken lately waits no longer than ``WAKE_S`` for
what came meanwhile, so no event waits longer."""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import Any

from mlxchat.engine.events import TextDelta

WAKE_S = 0.008
"""At most this long between two wake-ups for text deltas: far under what a
reader or a client's stream can tell."""
EVERY = 2
"""Text deltas a wake-up may wait for (half the wake-ups of one a token)."""


class EventBox:
    """``put`` on the engine thread, ``get`` on the caller's (``queue.Queue``'s
    two calls: ``get(timeout=)`` raises ``queue.Empty``)."""

    def __init__(self, wake_s: float = WAKE_S):
        self.wake_s = wake_s
        self._items: deque[Any] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._waiting = False
        self._woken_at = float("-inf")
        self._last_delta = False
        self._unwoken = 0
        """Deltas put since the caller was last woken."""

    def put(self, item: Any) -> None:
        delta = isinstance(item, TextDelta)
        with self._cond:
            self._items.append(item)
            follows, self._last_delta = self._last_delta, delta
            if not self._waiting:
                return
            self._unwoken += delta
            now = time.monotonic()
            if (not (delta and follows) or self._unwoken >= EVERY
                    or now - self._woken_at >= self.wake_s):
                self._woken_at, self._unwoken = now, 0
                self._cond.notify()

    def get(self, timeout: float | None = None) -> Any:
        with self._cond:
            end = None if timeout is None else time.monotonic() + timeout
            while not self._items:
                now = time.monotonic()
                # Woken lately: a delta may have come since without a wake-up.
                owed = self._woken_at + self.wake_s - now
                left = None if end is None else end - now
                if left is not None and left <= 0:
                    raise queue.Empty
                waits = [x for x in (owed if owed > 0 else None, left) if x is not None]
                self._waiting = True
                try:
                    self._cond.wait(min(waits) if waits else None)
                finally:
                    self._waiting = False
            return self._items.popleft()
