"""What the engine needs of each kind of mlx-lm cache layer, in one table.

A model's cache is a list of layers of a few mlx-lm classes. Every rule that
depends on the class lives in its row here: the bytes a layer holds, its
length, whether it keeps every position (``sliceable``) and can give tokens
back, the arrays and metadata a KV segment keeps of it and how consecutive
segments join back into a layer, quantizing, what the next tokens add
(``growth``), whether it joins a batch and whether a segment keeps it as rows
(``as_rows``: where each slot of a window's buffer stands). The rest of the
engine asks ``row(layer)`` (the interface is ``row.Row``) and never the
layer's class; a new cache class is one more row (and its tests in
tests/engine/test_layers.py).

Segment arrays are named per layer: ``k.J`` and ``v.J`` for the positions of a
layer that keeps them all (J counts a quantized layer's data, scales and
biases), ``s.J`` for the whole state of one that cannot be sliced (a
checkpoint at the segment's end), ``M.name`` for part M of a ``CacheList``.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import (
    ArraysCache,
    CacheList,
    ChunkedKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
)

from mlxchat.engine.kv.row import Arrays, Growth, Meta, Row, per_position, used_bytes


class _KeysValues(Row):
    """Attention keys and values: (B, H, T, D) arrays, allocated in steps."""

    def length(self, c: Any) -> int:
        return int(c.offset)

    def nbytes(self, c: Any) -> int:
        if c.keys is None:
            return 0
        return used_bytes((c.keys, c.values), min(self._held(c), self._parts(c.keys)[0].shape[-2]))

    def dtype(self, c: Any) -> mx.Dtype | None:
        return None if c.keys is None else c.keys.dtype

    def growth(self, c: Any) -> Growth:
        return [(per_position(c), self._window(c))]

    def _window(self, c: Any) -> int | None:
        """The positions it keeps at most (None: every one)."""
        return None

    def _held(self, c: Any) -> int:
        """Positions the arrays hold from their start."""
        return int(c.offset)

    def _parts(self, x: Any) -> tuple:
        return (x,)


class _Positions(_KeysValues):
    """Keys and values of every position so far."""

    count = 1
    """Arrays per keys (and per values)."""

    def sliceable(self, c: Any) -> bool:
        return True

    def arrays(self, c: Any, start: int, end: int) -> Arrays:
        if c.keys is None:
            return {}
        return {f"{name}.{j}": a[..., start:end, :]
                for name, part in (("k", c.keys), ("v", c.values))
                for j, a in enumerate(self._parts(part))}

    def fits(self, meta: Meta, fresh: Any) -> bool:
        return True  # a quantized layer stands in a fresh full-precision one

    def restore(self, meta: Meta, runs: Sequence[Arrays], length: int, into: Any = None) -> Any:
        layer = self._blank(meta)
        if length:
            for name in ("k", "v"):
                joined = []
                for j in range(self.count):
                    pieces = [run[f"{name}.{j}"] for run in runs]
                    joined.append(mx.concatenate(pieces, axis=-2) if len(pieces) > 1
                                  else pieces[0])
                setattr(layer, "keys" if name == "k" else "values", self._whole(joined))
        layer.offset = length
        return layer

    def _whole(self, parts: list[mx.array]) -> Any:
        return parts[0]

    def _blank(self, meta: Meta) -> Any:
        return self.cls()


class _Plain(_Positions):
    cls = KVCache
    batched = True

    def quantize(self, c: Any, bits: int, group: int) -> Any:
        return c.to_quantized(group_size=group, bits=bits)


class _Quantized(_Positions):
    """Keys and values each as (data, scales, biases)."""

    cls = QuantizedKVCache
    count = 3

    def bits(self, c: Any) -> int:
        return c.bits

    def dtype(self, c: Any) -> mx.Dtype | None:
        return None  # its bits say what it holds

    def meta(self, c: Any) -> Meta:
        return {"type": type(c).__name__, "bits": c.bits, "group": c.group_size}

    def layout(self, meta: Meta) -> tuple:
        return (meta["type"], meta.get("bits"), meta.get("group"))

    def _parts(self, x: Any) -> tuple:
        return tuple(x)

    def _whole(self, parts: list[mx.array]) -> Any:
        return tuple(parts)

    def _blank(self, meta: Meta) -> Any:
        return QuantizedKVCache(group_size=meta["group"], bits=meta["bits"])


class _Checkpointed(_KeysValues):
    """Keys and values saved whole at a segment's end (a window or a chunk:
    small, fixed size), not sliced."""

    as_rows = True

    def trims_anywhere(self, c: Any) -> bool:
        return False

    def restore(self, meta: Meta, runs: Sequence[Arrays], length: int, into: Any = None) -> Any:
        return _restored(self, meta, runs, into)

    def _blank(self, meta: Meta) -> Any:
        raise NotImplementedError

    def _load(self, layer: Any, meta: Meta, arrays: Arrays) -> None:
        raise NotImplementedError


def _restored(row: Any, meta: Meta, runs: Sequence[Arrays], into: Any) -> Any:
    """A checkpointed layer from the last segment's checkpoint, loaded ``into``
    the model's fresh layer when given, else into a blank one."""
    layer = into if into is not None else row._blank(meta)
    row._load(layer, meta, runs[-1])
    return layer


class _Window(_Checkpointed):
    """A sliding window: the last ``max_size`` positions, wrapped in place."""

    cls = RotatingKVCache
    batched = True

    def arrays(self, c: Any, start: int, end: int) -> Arrays:
        return {} if c.keys is None else {"s.0": c.keys, "s.1": c.values}

    def _window(self, c: Any) -> int:
        return int(c.max_size)

    def size(self, c: Any) -> int:
        return int(c.keys.shape[-2])

    def slots(self, meta: Meta, size: int) -> np.ndarray:
        """As mlx-lm's ``_temporal_order`` reads a rotating buffer."""
        s = np.arange(size, dtype=np.int64)
        offset, keep, _, idx = meta["meta"]
        if idx == size:  # in order: the newest at the end
            pos = offset - size + s
        elif idx < offset:  # wrapped: slot idx holds the oldest after the kept ones
            n = size - keep
            pos = np.where(s >= idx, offset - n + (s - idx), offset - (idx - keep) + (s - keep))
        else:  # not yet full: slots past idx unused
            pos = np.where(s < idx, offset - idx + s, -1)
        return np.where(s < min(keep, size), s, pos)

    def meta(self, c: Any) -> Meta:
        return {"type": type(c).__name__,
                "meta": [int(c.offset), int(c.keep), int(c.max_size), int(c._idx)]}

    def _blank(self, meta: Meta) -> Any:
        _, keep, max_size, _ = meta["meta"]
        return RotatingKVCache(max_size, keep)

    def _load(self, layer: Any, meta: Meta, arrays: Arrays) -> None:
        offset, keep, max_size, idx = meta["meta"]
        layer.state = (arrays.get("s.0"), arrays.get("s.1"), offset, keep, max_size, idx)


class _Chunked(_Checkpointed):
    """Chunked attention: the positions since the current chunk's start."""

    cls = ChunkedKVCache

    def trims_anywhere(self, c: Any) -> bool:
        return self.trimmable(c)  # within the chunk, as mlx-lm trims it

    def arrays(self, c: Any, start: int, end: int) -> Arrays:
        if c.keys is None:
            return {}
        held = self._held(c)
        return {"s.0": c.keys[..., :held, :], "s.1": c.values[..., :held, :]}

    def meta(self, c: Any) -> Meta:
        return {"type": type(c).__name__,
                "meta": [int(c.offset), int(c.chunk_size), int(c.start_position)]}

    def _held(self, c: Any) -> int:
        return int(c.offset) - int(c.start_position)

    def _window(self, c: Any) -> int:
        return int(c.chunk_size)

    def size(self, c: Any) -> int:
        return self._held(c)

    def slots(self, meta: Meta, size: int) -> np.ndarray:
        offset, _, start = meta["meta"]
        s = np.arange(size, dtype=np.int64)
        return np.where(s < offset - start, start + s, -1)

    def _blank(self, meta: Meta) -> Any:
        return ChunkedKVCache(meta["meta"][1])

    def _load(self, layer: Any, meta: Meta, arrays: Arrays) -> None:
        offset, chunk_size, start = meta["meta"]
        layer.state = (arrays.get("s.0"), arrays.get("s.1"), offset, chunk_size, start)


class _Recurrent(Row):
    """Recurrent state (conv and SSM slots): no positions at all, saved whole
    at a segment's end."""

    cls = ArraysCache

    def trims_anywhere(self, c: Any) -> bool:
        return False

    def restore(self, meta: Meta, runs: Sequence[Arrays], length: int, into: Any = None) -> Any:
        return _restored(self, meta, runs, into)

    def nbytes(self, c: Any) -> int:
        return sum(a.nbytes for a in c.cache if a is not None)

    def arrays(self, c: Any, start: int, end: int) -> Arrays:
        return {f"s.{j}": a for j, a in enumerate(a for a in c.cache if a is not None)}

    def meta(self, c: Any) -> Meta:
        return {"type": type(c).__name__, "slots": [a is not None for a in c.cache]}

    def _blank(self, meta: Meta) -> Any:
        return ArraysCache(len(meta["slots"]))

    def _load(self, layer: Any, meta: Meta, arrays: Arrays) -> None:
        held = iter(arrays[f"s.{j}"] for j in range(sum(meta["slots"])))
        layer.cache = [next(held) if present else None for present in meta["slots"]]


class _Mix(Row):
    """Several caches for one layer (``CacheList``): each part by its own row."""

    cls = CacheList

    def sliceable(self, c: Any) -> bool:
        return all(row(p).sliceable(p) for p in c.caches)

    def length(self, c: Any) -> int | None:
        return next((n for p in c.caches if (n := row(p).length(p)) is not None), None)

    def nbytes(self, c: Any) -> int:
        return sum(row(p).nbytes(p) for p in c.caches)

    def trims_anywhere(self, c: Any) -> bool:
        return all(row(p).trims_anywhere(p) for p in c.caches)

    def bits(self, c: Any) -> int | None:
        return next((b for p in c.caches if (b := row(p).bits(p)) is not None), None)

    def dtype(self, c: Any) -> mx.Dtype | None:
        return next((d for p in c.caches if (d := row(p).dtype(p)) is not None), None)

    def growth(self, c: Any) -> Growth:
        return [g for p in c.caches for g in row(p).growth(p)]

    def arrays(self, c: Any, start: int, end: int) -> Arrays:
        return {f"{m}.{name}": a for m, p in enumerate(c.caches)
                for name, a in row(p).arrays(p, start, end).items()}

    def meta(self, c: Any) -> Meta:
        return {"type": type(c).__name__, "parts": [row(p).meta(p) for p in c.caches]}

    def layout(self, meta: Meta) -> tuple:
        return (meta["type"], tuple(layout(m) for m in meta["parts"]))

    def fits(self, meta: Meta, fresh: Any) -> bool:
        parts = meta.get("parts", ())
        return (super().fits(meta, fresh) and len(parts) == len(fresh.caches)
                and all(restoring(m, p) is not None for m, p in zip(parts, fresh.caches)))

    def restore(self, meta: Meta, runs: Sequence[Arrays], length: int, into: Any = None) -> Any:
        parts = []
        for m, part_meta in enumerate(meta["parts"]):
            prefix = f"{m}."
            own = [{name[len(prefix):]: a for name, a in run.items() if name.startswith(prefix)}
                   for run in runs]
            parts.append(by_name(part_meta).restore(
                part_meta, own, length, into=None if into is None else into.caches[m]))
        return CacheList(*parts)


TABLE: dict[type, Row] = {r.cls: r for r in (_Plain(), _Quantized(), _Window(), _Chunked(),
                                              _Recurrent(), _Mix())}
"""Every cache class the engine knows, by class (subclasses take their base's row)."""

_BY_NAME = {cls.__name__: r for cls, r in TABLE.items()}


def row(c: Any) -> Row:
    """The row of a cache layer, or TypeError for a class the engine does not know."""
    for cls in type(c).__mro__:
        found = TABLE.get(cls)
        if found is not None:
            return found
    raise TypeError(f"the engine does not know mlx-lm's {type(c).__name__} cache layers")


def by_name(meta: Meta) -> Row:
    """The row of a layer a segment describes (KeyError: a class not known)."""
    return _BY_NAME[meta["type"]]


def layout(meta: Meta) -> tuple:
    found = _BY_NAME.get(meta["type"])
    return (meta["type"],) if found is None else found.layout(meta)


def restoring(meta: Meta, fresh: Any) -> Row | None:
    """The row that restores a segment's layer in place of the model's ``fresh``
    one, or None when the two do not match."""
    found = _BY_NAME.get(meta["type"])
    return found if found is not None and found.fits(meta, fresh) else None


def copy(c: Any) -> Any:
    """A new layer holding what ``c`` holds now, its arrays cut to the used
    length; later updates of ``c`` leave it as it is."""
    r = row(c)
    n = r.length(c) or 0
    arrays = {name: mx.array(a) for name, a in r.arrays(c, 0, n).items()}
    return r.restore(r.meta(c), [arrays], n)


def meta_bits(metas: Sequence[Meta]) -> int | None:
    """The KV bit width a segment's layer descriptions record (a mix's parts
    included), else None: what ``prompt_cache.bits`` says of the live layers."""
    for m in metas:
        bits = m.get("bits") or meta_bits(m.get("parts", ()))
        if bits:
            return bits
    return None
