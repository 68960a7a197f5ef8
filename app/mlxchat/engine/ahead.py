"""Prefill while the user types: the engine side.

``prefill(tokens)`` is a job on the engine thread that extends the live cache
toward ``tokens`` (the history plus the part of a message being typed that can
no longer change). A newer prefill or any turn supersedes it within one chunk;
it only ever trims tokens an earlier typing prefill added, so a reply or
another conversation in the cache is left for the turn to decide about.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Sequence

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

    def prefill(self, tokens: Sequence[int], settings: GenerationSettings) -> int:
        """Extend the cache toward ``tokens``; blocks until done, superseded or
        cancelled. Returns the tokens the cache holds from typing prefill (0
        when it was left alone)."""
        self.supersede_typing()
        cancel = threading.Event()
        self._typing = cancel
        self._cancels.add(cancel)  # type: ignore[attr-defined]
        wanted = list(tokens)
        fut: Future = Future()

        def job() -> int:
            if cancel.is_set():
                return 0
            self._cancel = cancel
            return self._prefill_ahead(wanted, settings)
        self._jobs.put((job, fut))  # type: ignore[attr-defined]
        try:
            return fut.result()
        finally:
            self._cancels.discard(cancel)  # type: ignore[attr-defined]
            if self._typing is cancel:
                self._typing = None

    def _prefill_ahead(self, tokens: list[int], settings: GenerationSettings) -> int:
        live = self._live  # type: ignore[attr-defined]
        if live.bits is not None and live.bits != settings.kv_bits:
            return 0  # the turn would start cold anyway
        start = live.extend_ahead(tokens)
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
