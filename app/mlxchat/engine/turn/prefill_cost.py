"""What prefilling costs here, measured: each prefill chunk's tokens, the
position it started at and its seconds, and a fit of time against tokens and
context position, to say how long a prompt will take before it is sent.

A chunk of ``n`` tokens fed after ``start`` held ones costs about
``a*n + b*(n*start + n*(n+1)/2)``: ``a`` what each token costs whatever the
context (the weights' matmuls), ``b`` what each of the positions it attends
to adds (attention). A rate measured near the start of a conversation says
too little of a long attachment's cost deep in it; this model says both.
(A forward pass's own cost, ~10 µs an op, is lost in a chunk of ~0.25 s;
fitted as a third term it took up the noise of small chunks instead.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable

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
    """Least squares of seconds on tokens and attended positions, both costs
    at least 0; a token's cost alone when the chunks are too few (under four)
    or cannot tell the two apart, or the cost per position came out below 0.
    None without a measured chunk."""
    usable = [c for c in chunks if c.tokens > 0 and c.seconds > 0]
    if not usable:
        return None
    rows = [[float(c.tokens), attended(c.tokens, c.start)] for c in usable]
    times = [c.seconds for c in usable]
    if len(usable) >= 4:
        both = _solve(rows, times)
        if both is not None and min(both) >= 0:
            return PrefillCost(both[0], both[1], len(usable))
    (rate,) = _solve([r[:1] for r in rows], times) or [0.0]
    return PrefillCost(rate, 0.0, len(usable))


def _solve(x: list[list[float]], y: list[float]) -> list[float] | None:
    """The least-squares coefficients of ``y`` on the columns of ``x`` (normal
    equations, scaled); None when the columns cannot be told apart."""
    k = len(x[0])
    scale = [max(abs(r[j]) for r in x) or 1.0 for j in range(k)]
    xs = [[r[j] / scale[j] for j in range(k)] for r in x]
    m = [[sum(r[i] * r[j] for r in xs) for j in range(k)]
         + [sum(r[i] * t for r, t in zip(xs, y, strict=True))] for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda i: abs(m[i][col]))
        if abs(m[pivot][col]) < 1e-9 * max(abs(m[i][i]) for i in range(k)):
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for i in range(k):
            if i != col:
                f = m[i][col] / m[col][col]
                m[i] = [a - f * b for a, b in zip(m[i], m[col], strict=True)]
    return [m[i][k] / m[i][i] / scale[i] for i in range(k)]


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
