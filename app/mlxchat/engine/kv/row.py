"""The interface every row of the cache-layer table (``layers``) implements.

A row holds the rules of one mlx-lm cache class; the defaults here are a
layer's that holds no positions and cannot be sliced. Only ``layers`` asks
what class a layer is (tests/unit/test_house.py holds it).
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

Arrays = dict[str, mx.array]
Meta = dict[str, Any]
Growth = list[tuple[int | None, int | None]]
"""(bytes one more position takes, window or None: every position kept) per
part of a layer that grows; None bytes while the part holds nothing to read
them from."""


def used_bytes(arrays: Any, used: int) -> int:
    """Bytes of the first ``used`` positions of (B, H, T, D) arrays: mlx-lm
    allocates in 256-slot steps, and the unused tail is not counted."""
    return sum(a.nbytes * used // a.shape[-2] if a.shape[-2] else 0
               for _, a in tree_flatten(arrays))


class Row:
    """The rules of one cache class. The defaults are a layer's that holds no
    positions and cannot be sliced."""

    cls: type

    def sliceable(self, c: Any) -> bool:
        """It keeps every position: any span can be cut out, and spans joined."""
        return False

    def length(self, c: Any) -> int | None:
        """Tokens it has seen (mlx-lm's ``offset``); None for a recurrent state."""
        return None

    def nbytes(self, c: Any) -> int:
        raise NotImplementedError

    def trimmable(self, c: Any) -> bool:
        """It can give tokens back now."""
        return bool(c.is_trimmable())

    def trims_anywhere(self, c: Any) -> bool:
        """It can give tokens back at any length (speculation relies on it)."""
        return self.trimmable(c)

    def bits(self, c: Any) -> int | None:
        """The bit width of a quantized layer, else None."""
        return None

    def dtype(self, c: Any) -> mx.Dtype | None:
        """The float type of its keys (None: quantized, empty, or not keys)."""
        return None

    def quantize(self, c: Any, bits: int, group: int) -> Any:
        return c

    def arrays(self, c: Any, start: int, end: int) -> Arrays:
        """What a segment of positions ``[start, end)`` keeps of it."""
        raise NotImplementedError

    def meta(self, c: Any) -> Meta:
        """What a segment says of it, beside its arrays (JSON)."""
        return {"type": type(c).__name__}

    def layout(self, meta: Meta) -> tuple:
        """What consecutive segments of a layer must agree on."""
        return (meta["type"],)

    def fits(self, meta: Meta, fresh: Any) -> bool:
        """A segment's layer may stand in the model's freshly made ``fresh``."""
        return meta["type"] == type(fresh).__name__

    def restore(self, meta: Meta, runs: Sequence[Arrays], length: int, into: Any = None) -> Any:
        """The layer from its arrays in consecutive segments (``runs``, oldest
        first), holding ``length`` tokens. A checkpoint is loaded ``into`` the
        model's fresh layer when given, else into a new one."""
        raise NotImplementedError

    def growth(self, c: Any) -> Growth:
        """What the next tokens add to it, part by part (``kv/room.py``); a
        recurrent state adds nothing."""
        return []

    batched = False
    """mlx-lm has a batch form of the class whose ``extract`` is exact."""

    def joins_batch(self, c: Any) -> bool:
        """It joins a batch through ``type(c).merge`` (a subclass does not)."""
        return self.batched and type(c) is self.cls

    as_rows = False
    """A segment keeps it as the rows it added (``disk/window_rows.py``), not
    sliced or whole."""

    def size(self, c: Any) -> int:
        """The slots of its buffer a segment's rows are read from (``as_rows``)."""
        raise NotImplementedError

    def slots(self, meta: Meta, size: int) -> np.ndarray:
        """The position each of ``size`` slots holds (-1: unused) at the end
        ``meta`` describes (``as_rows``)."""
        raise NotImplementedError




def per_position(c: Any) -> int | None:
    """Bytes one position takes in a keys-and-values layer; None while empty."""
    if getattr(c, "keys", None) is None:
        return None
    return sum(a.nbytes // a.shape[-2] for _, a in tree_flatten((c.keys, c.values))
               if a.shape[-2])
