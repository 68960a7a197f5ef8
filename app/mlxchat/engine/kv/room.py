"""How the live KV cache grows from here, layer kind by layer kind.

The room figures (the gauge's "memory would fit", ``/cache``'s bytes per
token, the KV an attachment or a pin will take) need the bytes the next
tokens add, not the average so far: a layer that keeps every token grows by
the same bytes per token forever, a sliding-window layer only until it holds
its window (a chunked layer until its chunk), a recurrent state never. Each
layer's bytes per position are read from its arrays' shapes, so quantized
layers count their scales and biases. What each layer kind adds is its row's
``growth`` (``layers``).
"""

from __future__ import annotations

from typing import Any

from mlxchat.engine.kv.layers import row
from mlxchat.models.memory import KVLayout


def layout(cache: list[Any]) -> KVLayout | None:
    """The cache's bytes per token by layer kind, read from its arrays; None
    while a layer that keeps positions holds none (nothing to read them from)."""
    full, windows = 0, {}
    for c in cache:
        for per, window in row(c).growth(c):
            if per is None:
                return None
            if window is None:
                full += per
            else:
                windows[window] = windows.get(window, 0) + per
    return KVLayout(full, tuple((b, w) for w, b in sorted(windows.items())))
