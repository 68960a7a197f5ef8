"""A read-only picture of a live KV cache, for tests and diagnostics.

Taken on the engine thread (``ChatEngine.live_view``), it never changes
afterwards: its layers are copies, and ``cache()`` hands out new copies of
those, so a caller may run a model on them without touching the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from mlxchat.engine.kv import layers, prompt_cache
from mlxchat.engine.kv.live import LiveCache


@dataclass(frozen=True)
class LayerView:
    """One layer of the cache, as the engine's table of layer kinds sees it."""

    kind: str
    """The mlx-lm cache class's name ('KVCache', 'RotatingKVCache', ...)."""
    length: int | None
    """Tokens it has seen; None for a recurrent state."""
    nbytes: int
    """Bytes of its used length."""
    bits: int | None
    """Its bit width when quantized."""
    dtype: str | None
    """Its keys' dtype ('float32', ...); None when quantized, empty or no keys."""
    sliceable: bool
    trimmable: bool


@dataclass(frozen=True)
class LiveView:
    """The live cache at one moment: its token ids, figures and layers."""

    tokens: tuple[int, ...]
    """The token ids the engine says the cache holds."""
    length: int
    """Tokens the arrays hold (``prompt_cache.offset``): equal to ``len(tokens)`` between turns."""
    nbytes: int
    bits: int | None
    dtype: str
    """As the gauges show it: 'fp32', '4-bit', ..."""
    trimmable: bool
    layers: tuple[LayerView, ...]
    _copies: tuple[Any, ...] = field(repr=False, compare=False)

    def cache(self) -> list[Any]:
        """New mlx-lm cache objects holding what the cache held, cut to its length."""
        return [layers.copy(c) for c in self._copies]


def view_of(live: LiveCache) -> LiveView:
    """The picture of ``live`` now (on the engine thread, which evaluates the copies)."""
    cache = live.layers
    copies = tuple(layers.copy(c) for c in cache)
    mx.eval([c.state for c in copies])
    return LiveView(tokens=tuple(live.tokens), length=prompt_cache.offset(cache),
                    nbytes=live.nbytes, bits=live.bits, dtype=live.dtype_label,
                    trimmable=prompt_cache.trimmable(cache),
                    layers=tuple(_layer(c) for c in cache), _copies=copies)


def _layer(c: Any) -> LayerView:
    row = layers.row(c)
    dtype = row.dtype(c)
    return LayerView(kind=type(c).__name__, length=row.length(c), nbytes=row.nbytes(c),
                     bits=row.bits(c), sliceable=row.sliceable(c), trimmable=row.trimmable(c),
                     dtype=None if dtype is None else str(dtype).removeprefix("mlx.core."))
