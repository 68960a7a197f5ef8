"""Prefill while the user types: the engine side.

``prefill(tokens)`` is a job on the engine thread that extends the live cache
toward ``tokens`` (the history plus the part of a message being typed that can
no longer change). A newer prefill or any turn supersedes it within one chunk;
it never trims into the history it was planned on, and does nothing once a
turn has run since it was planned.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Callable, Sequence

from mlxchat.chat import GenerationSettings
from mlxchat.engine.progress import LiveFigures
from mlxchat.engine.results import Cancelled


class TypingPrefill:
    """Mixed into ChatEngine (which provides the queue, the cache and ``_prefill``)."""

    _typing: threading.Event | None = None

    def supersede_typing(self) -> None:
        """Stop a running or queued typing prefill (a turn takes precedence)."""
        ev = self._typing
        if ev is not None:
            ev.set()

    def prefill(self, tokens: Sequence[int], settings: GenerationSettings, *, floor: int = 0,
                current: Callable[[], bool] = lambda: True) -> int:
        """Extend the cache toward ``tokens``, trimming it no shorter than
        ``floor``; blocks until done, superseded or cancelled. ``current()`` is
        asked on the engine thread first: False (a turn ran since ``tokens``
        were planned) leaves the cache alone. Returns the tokens the cache
        holds from typing prefill (0 when it was left alone)."""
        self.supersede_typing()
        if not self._thread.is_alive():  # type: ignore[attr-defined]
            return 0  # closed: no job would ever run
        cancel = threading.Event()
        self._typing = cancel
        self._cancels.add(cancel)  # type: ignore[attr-defined]
        wanted = list(tokens)
        fut: Future = Future()

        def job() -> int:
            if cancel.is_set() or not current():
                return 0
            self._cancel = cancel
            return self._prefill_ahead(wanted, settings, floor)
        self._jobs.put((job, fut))  # type: ignore[attr-defined]
        try:
            return fut.result()
        finally:
            self._cancels.discard(cancel)  # type: ignore[attr-defined]
            if self._typing is cancel:
                self._typing = None

    def _prefill_ahead(self, tokens: list[int], settings: GenerationSettings,
                       floor: int) -> int:
        live = self._live  # type: ignore[attr-defined]
        if live.bits is not None and live.bits != settings.kv_bits:
            return 0  # the turn would start cold anyway
        start = live.extend_ahead(tokens, floor)
        if start is None:
            return 0
        t0 = time.perf_counter()
        try:
            self._prefill(tokens[start:], LiveFigures(live, len(tokens) - start,  # type: ignore
                                                      lambda _event: None))
        except Cancelled:
            pass
        finally:
            live.ahead_s += time.perf_counter() - t0
            live.settle_ahead()
            self._refresh_state()  # type: ignore[attr-defined]
        return len(live.tokens) - live.ahead_end
