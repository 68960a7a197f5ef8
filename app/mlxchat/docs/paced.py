"""Embedding in slices timed to a fraction of a second, so that a cancel is
heard within one slice however slow the device (on this Linux CPU the
bundled embedder does ~3 chunks/s: a batch of 64 would be 20 s of deafness)."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from mlxchat.docs.embedder import Embedder

SLICE_S = 0.3
"""What one slice aims to take."""
MAX_SLICE = 64


class PacedEmbedder:
    """``embedder`` called on slices sized from the last slice's rate."""

    def __init__(self, embedder: Embedder, *, slice_s: float = SLICE_S):
        self.embedder = embedder
        self.slice_s = slice_s
        self.size = 2
        """Chunks in the next slice (starts small: the first cancel is heard soon)."""

    def embed(self, texts: Sequence[str], stop: Callable[[], bool] = lambda: False
              ) -> np.ndarray:
        """The vectors of ``texts`` in order; fewer rows (the first ones) when
        ``stop()`` turned true between slices."""
        out, at = [], 0
        while at < len(texts) and not stop():
            n = self.size
            began = time.perf_counter()
            out.append(self.embedder.embed(list(texts[at:at + n])))
            spent = time.perf_counter() - began
            if len(out[-1]) == n:  # a full slice measured the rate
                self.size = max(1, min(MAX_SLICE, int(n * self.slice_s / max(spent, 1e-4))))
            at += n
        if not out:
            return np.zeros((0, self.embedder.dims), np.float32)
        return np.concatenate(out)
