"""Live figures for a running turn's events, computed cheaply on the engine thread."""

from __future__ import annotations

import time
from typing import Callable

from mlxchat.engine.events import Event, PrefillProgress, TextDelta, TurnDone
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.results import prefill_rate


class LiveFigures:
    """Wraps a turn's ``emit`` to give each event the cache's size as it grows:
    tokens from the live token list, bytes scaled from the bytes per token read
    from the arrays' metadata once (no MLX work), and a last PrefillProgress at
    the total when the tail is fed (it is fed with the first sampled token)."""

    def __init__(self, live: LiveCache, total: int, emit: Callable[[Event], None]):
        self.live, self.total, self._emit = live, total, emit
        self._per_token = 0.0
        self._start = time.perf_counter()
        self._prefill_open = True

    def _figures(self) -> tuple[int, int]:
        n = len(self.live.tokens)
        if not self._per_token and n:
            self._per_token = self.live.nbytes / n
        return n, int(self._per_token * n)

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
