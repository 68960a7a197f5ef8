"""What prefilling costs here, measured: each prefill chunk's tokens, the
position it started at and its seconds, and a fit of time against tokens and
context position, to say how long a prompt will take before it is sent.

A chunk of ``n`` tokens fed after ``start`` held ones costs about
``a*n + b*(n*start + n*(n+1)/2)``: ``a`` what each token costs whatever the
context (the weights' matmuls), ``b`` what each of the positions it attends
to adds (attention). A rate measured near the start of a conversation says
too little of a long attachment's cost deep in it; this model says both.
A pass also costs something whatever its size (reading the weights, ~10 µs
an op): lost in a chunk of ~0.25 s, but most of the time of the few-token
chunks a chat's first short messages give, whose time spread over their
tokens forecast a long attachment at 1 min 23 s that took 35 s. Fitted as a
free third term it took up the noise of small chunks instead; it is
measured instead, as a decode step (a pass that feeds one token): given
that ``step``, a chunk of ``n`` costs ``step + a*(n-1) + b*...``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable

KEEP = 256
"""Chunks kept (the newest): a long prefill's worth."""
CHUNK_SECONDS = 0.25
"""What a prefill chunk aims to take (the engine sizes its chunks to it)."""


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
    per_pass: float = 0.0
    """What each forward pass costs whatever its size (0: not measured)."""

    def seconds(self, tokens: int, start: int) -> float:
        """Time to prefill ``tokens`` after ``start`` held ones, in chunks of
        about ``CHUNK_SECONDS``."""
        return (self.per_token * tokens + self.per_position * attended(tokens, start)
                + self.per_pass * self.passes(tokens, start))

    def passes(self, tokens: int, start: int) -> int:
        """Chunks ``tokens`` take when each is sized to ``CHUNK_SECONDS`` (16 to
        2,048 tokens, as the engine sizes them)."""
        each = self.per_token + self.per_position * (start + tokens / 2)
        room = CHUNK_SECONDS - self.per_pass
        size = 2048 if each <= 0 else max(16, min(2048, int(max(room, 0) / each)))
        return math.ceil(tokens / size) if tokens > 0 else 0

    def rate(self, start: int) -> float | None:
        """Tokens a second for a token at position ``start`` (None: no cost measured)."""
        cost = self.per_token + self.per_position * (start + 1)
        return 1 / cost if cost > 0 else None


def fit(chunks: Iterable[PrefillChunk], *, step: float | None = None) -> PrefillCost | None:
    """Least squares of seconds on tokens and attended positions, both costs
    at least 0; a token's cost alone when the chunks are too few (under four)
    or cannot tell the two apart, or the cost per position came out below 0.
    ``step``: a decode step's measured seconds, the cost of a pass of one
    token; each chunk's first token is then taken as costing that (its pass's
    fixed part included; ``fit_with_step``). None without a measured chunk."""
    usable = [c for c in chunks if c.tokens > 0 and c.seconds > 0]
    if not usable:
        return None
    if step and step > 0:
        with_step = fit_with_step(usable, step)
        if with_step is not None:
            return with_step
    rows = [[float(c.tokens), attended(c.tokens, c.start)] for c in usable]
    times = [c.seconds for c in usable]
    if len(usable) >= 4:
        both = _solve(rows, times)
        if both is not None and min(both) >= 0:
            return PrefillCost(both[0], both[1], len(usable))
    (rate,) = _solve([r[:1] for r in rows], times) or [0.0]
    return PrefillCost(rate, 0.0, len(usable))


def fit_with_step(chunks: list[PrefillChunk], step: float) -> PrefillCost | None:
    """The fit of ``seconds - step`` on a chunk's other tokens (and what they
    attend to): a pass's fixed part is ``step`` less a token's cost. None when
    no chunk has more than one token, or a token came out costing more than a
    whole step (the step was measured in other conditions)."""
    many = [c for c in chunks if c.tokens > 1]
    if not many:
        return None
    rows = [[float(c.tokens - 1), attended(c.tokens - 1, c.start + 1)] for c in many]
    times = [c.seconds - step for c in many]
    if len(many) >= 4:
        both = _solve(rows, times)
        if both is not None and min(both) >= 0 and both[0] <= step:
            return PrefillCost(both[0], both[1], len(many), per_pass=step - both[0])
    (rate,) = _solve([r[:1] for r in rows], times) or [-1.0]
    if not 0 < rate <= step:
        return None
    return PrefillCost(rate, 0.0, len(many), per_pass=step - rate)


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
