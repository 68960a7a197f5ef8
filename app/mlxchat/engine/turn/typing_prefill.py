"""Prefill while the user types: the engine side.

``ChatEngine.prefill(tokens)`` queues a job on the engine thread that extends
the live cache toward ``tokens`` (the history plus the part of a message being
typed that can no longer change). A newer prefill or any turn supersedes it
within one chunk; it never trims into the history it was planned on, and does
nothing once a turn has run since it was planned.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Callable, Sequence

from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.results import Cancelled
from mlxchat.engine.thread.compute import WaitCancelled
from mlxchat.engine.turn.progress import LiveFigures

Submit = Callable[[Callable[[], int], threading.Event], Future]
"""Queues a job on the engine thread, to run as the work ``cancel`` stops."""

Feed = Callable[[Sequence[int], LiveFigures], object]
"""The engine's chunked, cancellable prefill of tokens after the live cache's."""


class TypingPrefill:
    """The typing prefill queued or running (at most one): started, superseded
    and waited for from any thread, run on the engine thread."""

    def __init__(self, *, submit: Submit, alive: Callable[[], bool], feed: Feed,
                 refresh: Callable[[], None]):
        self._submit, self._alive, self._feed, self._refresh = submit, alive, feed, refresh
        self._current: threading.Event | None = None

    @property
    def current(self) -> threading.Event | None:
        """The cancel signal of the typing prefill queued or running, if any."""
        return self._current

    def supersede(self) -> None:
        """Stop a running or queued typing prefill (a turn takes precedence)."""
        ev = self._current
        if ev is not None:
            ev.set()

    def run(self, job: Callable[[], int]) -> int:
        """Supersede the one before, queue ``job`` and wait for its result: 0
        when it was superseded before it ran, or the engine is closed."""
        self.supersede()
        if not self._alive():
            return 0  # closed: no job would ever run
        cancel = threading.Event()
        self._current = cancel
        fut = self._submit(lambda: 0 if cancel.is_set() else job(), cancel)
        try:
            return fut.result()
        except WaitCancelled:
            return 0  # superseded while another engine computed
        finally:
            if self._current is cancel:
                self._current = None

    def extend(self, live: LiveCache, tokens: list[int], *, kv_bits: int | None,
               floor: int) -> int:
        """Engine thread: extend ``live`` toward ``tokens``, trimming it no
        shorter than ``floor``. Returns the tokens it holds from typing prefill."""
        if live.bits is not None and live.bits != kv_bits:
            return 0  # the turn would start cold anyway
        start = live.extend_ahead(tokens, floor)
        if start is None:
            return 0
        t0 = time.perf_counter()
        try:
            self._feed(tokens[start:], LiveFigures(live, len(tokens) - start,
                                                   lambda _event: None))
        except Cancelled:
            pass
        finally:
            live.ahead_s += time.perf_counter() - t0
            live.settle_ahead()
            self._refresh()
        return len(live.tokens) - live.ahead_end
