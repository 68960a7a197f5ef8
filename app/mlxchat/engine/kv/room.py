"""How the live KV cache grows from here, layer kind by layer kind.

The room figures (the gauge's "memory would fit", ``/cache``'s bytes per
token, the KV an attachment or a pin will take) need the bytes the next
tokens add, not the average so far: a layer that keeps every token grows by
the same bytes per token forever, a sliding-window layer only until it holds
its window (a chunked layer until its chunk), a recurrent state never. Each
layer's bytes per position are read from its arrays' shapes, so quantized
layers count their scales and biases.
"""

from __future__ import annotations

from typing import Any

from mlx.utils import tree_flatten
from mlx_lm.models.cache import ArraysCache, CacheList, ChunkedKVCache, RotatingKVCache

from mlxchat.models.memory import KVLayout


def _per_position(c: Any) -> int | None:
    """Bytes one position takes in a keys-and-values layer; None while empty."""
    if getattr(c, "keys", None) is None:
        return None
    return sum(a.nbytes // a.shape[-2] for _, a in tree_flatten((c.keys, c.values))
               if a.shape[-2])


def _parts(c: Any) -> list[tuple[int | None, int | None]]:
    """(bytes per position, window or None for every position) of each part of
    a layer; a recurrent state has none."""
    if isinstance(c, CacheList):
        return [p for part in c.caches for p in _parts(part)]
    if isinstance(c, ArraysCache):
        return []
    if isinstance(c, RotatingKVCache):
        return [(_per_position(c), int(c.max_size))]
    if isinstance(c, ChunkedKVCache):
        return [(_per_position(c), int(c.chunk_size))]
    return [(_per_position(c), None)]


def layout(cache: list[Any]) -> KVLayout | None:
    """The cache's bytes per token by layer kind, read from its arrays; None
    while a layer that keeps positions holds none (nothing to read them from)."""
    full, windows = 0, {}
    for c in cache:
        for per, window in _parts(c):
            if per is None:
                return None
            if window is None:
                full += per
            else:
                windows[window] = windows.get(window, 0) + per
    return KVLayout(full, tuple((b, w) for w, b in sorted(windows.items())))
