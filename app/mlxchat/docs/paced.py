"""Embedding in slices timed to under a second, so that a cancel is heard
within one slice however slow the device (on this Linux CPU the bundled
embedder takes 7 s for a batch of 64: as long without hearing a cancel).

A call has a fixed cost (numpy's matrix products are slow on few rows), so
the slice grows while a slice is quicker than ``slice_s`` and halves when
one takes over twice that: it settles where a slice takes between the two.
Measured here (``bench/hostile.py``, a loaded machine): 64 chunks of the
usual ~280 tokens took 44.9 s in slices against 39.5 s in one call (1.14x),
and a cancel was heard after 0.2 s; chunks of 80 tokens cost 3.3x."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from mlxchat.docs.embedder import Embedder

SLICE_S = 0.5
"""A slice quicker than this grows; one over twice this halves."""
MAX_SLICE = 64


class PacedEmbedder:
    """``embedder`` called on slices sized from the last slice's rate."""

    def __init__(self, embedder: Embedder, *, slice_s: float = SLICE_S):
        self.embedder = embedder
        self.slice_s = slice_s
        self.size = 2
        """Chunks in the next slice (starts small: the first cancel is heard soon)."""

    def embed(self, texts: Sequence[str], stop: Callable[[], bool] = lambda: False,
              done: Callable[[int], None] = lambda n: None) -> np.ndarray:
        """The vectors of ``texts`` in order; fewer rows (the first ones) when
        ``stop()`` turned true between slices. ``done(n)`` after each slice:
        ``n`` of them embedded so far."""
        out, at = [], 0
        while at < len(texts) and not stop():
            n = self.size
            began = time.perf_counter()
            out.append(self.embedder.embed(list(texts[at:at + n])))
            spent = time.perf_counter() - began
            if len(out[-1]) == n and spent < self.slice_s:  # a full slice was quick
                self.size = min(MAX_SLICE, n * 2)
            elif spent > 2 * self.slice_s:
                self.size = max(1, n // 2)
            at += n
            done(min(at, len(texts)))
        if not out:
            return np.zeros((0, self.embedder.dims), np.float32)
        return np.concatenate(out)
