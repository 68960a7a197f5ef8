"""Live figures for a running turn's events, computed cheaply on the engine thread."""

from __future__ import annotations

import time
from typing import Callable

from mlxchat.engine.events import Event, PrefillProgress, TextDelta, TurnDone
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.results import prefill_rate
from mlxchat.models.memory import KVLayout


class LiveFigures:
    """Wraps a turn's ``emit`` to give each event the cache's size as it grows:
    tokens from the live token list, bytes grown by the bytes per token of
    each layer kind read from the arrays' metadata once (no MLX work; a
    sliding window stops growing when full), and a last PrefillProgress at
    the total when the tail is fed (it is fed with the first sampled token)."""

    def __init__(self, live: LiveCache, total: int, emit: Callable[[Event], None]):
        self.live, self.total, self._emit = live, total, emit
        self._from: tuple[int, int, KVLayout] | None = None
        """(tokens, bytes, layout) read once from the arrays' metadata."""
        self._start = time.perf_counter()
        self._prefill_open = True

    def _figures(self) -> tuple[int, int]:
        n = len(self.live.tokens)
        if self._from is None and n and (layout := self.live.layout) is not None:
            self._from = n, self.live.nbytes, layout
        if self._from is None or n < self._from[0]:
            return n, self.live.nbytes
        held, nbytes, layout = self._from
        return n, nbytes + layout.added(held, n - held)

    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta) and self._prefill_open:
            self._close_prefill()
        if isinstance(event, (PrefillProgress, TextDelta)):
            event.cached_tokens, event.kv_bytes = self._figures()
        self._emit(event)

    def _close_prefill(self) -> None:
        self._prefill_open = False
        rate = prefill_rate(self.total, time.perf_counter() - self._start)
        self(PrefillProgress(self.total, self.total, rate))

    def done(self, event: TurnDone) -> None:
        if self._prefill_open and event.stats.generated_tokens:
            self._close_prefill()
        self._emit(event)
