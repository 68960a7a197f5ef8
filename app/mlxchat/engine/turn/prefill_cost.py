"""What prefilling costs here, measured: each prefill chunk's tokens, the
position it started at and its seconds, and a fit of time against tokens and
context position, to say how long a prompt will take before it is sent.

A chunk of ``n`` tokens fed after ``start`` held ones costs about
``c + a*n + b*(n*start + n*(n+1)/2)``: ``c`` what each forward pass costs
whatever its size, ``a`` what each token costs whatever the context (the
weights' matmuls), ``b`` what each of the positions it attends to adds
(attention). A rate measured near the start of a conversation says too little
of a long attachment's cost deep in it; this model says both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable

KEEP = 256
"""Chunks kept (the newest): a long prefill's worth."""
CHUNK_SECONDS = 0.25
"""What a prefill chunk aims to take (the engine's default): a cancel lands
within one."""


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
    each position a token attends to, ``per_chunk`` each forward pass."""

    per_token: float
    per_position: float
    chunks: int
    """How many measured chunks the figures come from."""
    per_chunk: float = 0.0

    def seconds(self, tokens: int, start: int, *,
                chunk_seconds: float = CHUNK_SECONDS) -> float:
        """Time to prefill ``tokens`` after ``start`` held ones, in chunks of
        about ``chunk_seconds`` (each pays ``per_chunk`` on top of its tokens)."""
        work = self.per_token * tokens + self.per_position * attended(tokens, start)
        overhead = min(self.per_chunk / chunk_seconds, 0.5) if chunk_seconds > 0 else 0.5
        return work / (1 - overhead)

    def rate(self, start: int) -> float | None:
        """Tokens a second for a token at position ``start``, passes' cost aside
        (None: no cost measured)."""
        cost = self.per_token + self.per_position * (start + 1)
        return 1 / cost if cost > 0 else None


_TERMS = ((1,), (1, 2), (0, 1), (0, 1, 2))
"""Which of (per chunk, per token, per position) a fit may use: a token's own
cost always (its matmuls cost something at any depth)."""


def fit(chunks: Iterable[PrefillChunk]) -> PrefillCost | None:
    """Least squares of seconds on passes, tokens and attended positions,
    every cost at least 0: of the fits on some of the three that leave none
    below 0, the closest; more costs only with two chunks more than costs.
    None without a measured chunk."""
    usable = [c for c in chunks if c.tokens > 0 and c.seconds > 0]
    if not usable:
        return None
    rows = [(1.0, float(c.tokens), attended(c.tokens, c.start)) for c in usable]
    times = [c.seconds for c in usable]
    best: tuple[float, list[float]] | None = None
    for terms in _TERMS:
        if len(terms) > 1 and len(usable) < len(terms) + 2:
            continue
        coefs = _solve([[r[i] for i in terms] for r in rows], times)
        if coefs is None or min(coefs) < 0:
            continue
        full = [0.0, 0.0, 0.0]
        for i, value in zip(terms, coefs, strict=True):
            full[i] = value
        error = sum((t - sum(f * x for f, x in zip(full, r, strict=True))) ** 2
                    for r, t in zip(rows, times, strict=True))
        if best is None or error < best[0]:
            best = (error, full)
    if best is None:  # never: one token cost alone fits any measured chunks
        return None
    c, a, b = best[1]
    return PrefillCost(per_token=a, per_position=b, chunks=len(usable), per_chunk=c)


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
