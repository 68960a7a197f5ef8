"""What prefilling costs here, measured: each prefill chunk's tokens, the
position it started at and its seconds, and a fit of time against tokens and
context position, to say how long a prompt will take before it is sent.

A chunk of ``n`` tokens fed after ``start`` held ones costs about
``a*n + b*(n*start + n*(n+1)/2)``: ``a`` what each token costs whatever the
context (the weights' matmuls), ``b`` what each of the positions it attends to
adds (attention). A rate measured near the start of a conversation says too
little of a long attachment's cost deep in it; this model says both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence

KEEP = 256
"""Chunks kept (the newest): a long prefill's worth."""


@dataclass(frozen=True)
class PrefillChunk:
    """One measured prefill step."""

    tokens: int
    start: int
    """Tokens the cache held before it (the context it attended to)."""
    seconds: float


def attended(tokens: int, start: int) -> float:
    """Positions ``tokens`` fed after ``start`` held ones attend to, summed."""
    return tokens * start + tokens * (tokens + 1) / 2


@dataclass(frozen=True)
class PrefillCost:
    """Seconds a prefill takes: ``per_token`` each token, ``per_position``
    each position a token attends to."""

    per_token: float
    per_position: float
    chunks: int
    """How many measured chunks the figures come from."""

    def seconds(self, tokens: int, start: int) -> float:
        """Time to prefill ``tokens`` after ``start`` held ones."""
        return self.per_token * tokens + self.per_position * attended(tokens, start)

    def rate(self, start: int) -> float | None:
        """Tokens a second for a token at position ``start`` (None: no cost measured)."""
        cost = self.per_token + self.per_position * (start + 1)
        return 1 / cost if cost > 0 else None


def fit(chunks: Iterable[PrefillChunk]) -> PrefillCost | None:
    """Least squares of seconds on tokens and attended positions, both
    costs at least 0; one cost alone when the chunks cannot tell them apart
    (all at one depth) or the other came out below 0. None without chunks."""
    usable = [c for c in chunks if c.tokens > 0 and c.seconds > 0]
    if not usable:
        return None
    n = [float(c.tokens) for c in usable]
    w = [attended(c.tokens, c.start) for c in usable]
    t = [c.seconds for c in usable]
    snn, sww, snw = _dot(n, n), _dot(w, w), _dot(n, w)
    snt, swt = _dot(n, t), _dot(w, t)
    det = snn * sww - snw * snw
    if det > 1e-9 * snn * sww:
        a, b = (snt * sww - swt * snw) / det, (swt * snn - snt * snw) / det
        if a >= 0 and b >= 0:
            return PrefillCost(a, b, len(usable))
        if a < 0 < swt:
            return PrefillCost(0.0, swt / sww, len(usable))
    return PrefillCost(snt / snn, 0.0, len(usable))


def _dot(x: Sequence[float], y: Sequence[float]) -> float:
    return sum(a * b for a, b in zip(x, y, strict=True))


class PrefillChunks:
    """The newest chunks measured on one setup (model, compute dtype, KV
    bits): another setup starts over. Written on the engine thread, read from
    any (the tuple is replaced, never changed)."""

    def __init__(self) -> None:
        self._setup: Hashable = None
        self._chunks: tuple[PrefillChunk, ...] = ()

    def record(self, setup: Hashable, tokens: int, start: int, seconds: float) -> None:
        if setup != self._setup:
            # The first chunk on a setup pays its first-call costs: not its rate.
            self._setup, self._chunks = setup, ()
            return
        self._chunks = (*self._chunks[-(KEEP - 1):], PrefillChunk(tokens, start, seconds))

    def recent(self, setup: Hashable) -> list[PrefillChunk]:
        """The chunks measured on ``setup`` (none when the engine runs another)."""
        return list(self._chunks) if setup == self._setup else []
