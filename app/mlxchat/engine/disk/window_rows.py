"""Sliding-window and chunked layers on disk as the rows a turn changed.

A window layer (mlx-lm's ``RotatingKVCache``) or a chunked one
(``ChunkedKVCache``) holds the keys and values of some recent positions in
slots of a buffer. Segment format 1 saved that whole buffer at every segment's
end (a whole window a turn, however few tokens the turn added). Format 2 saves
only the rows of the positions the layer still holds that the segment added
(``w.0`` keys, ``w.1`` values, positions in order; their positions in the
layer's description as ``rows``), with the buffer's size. A position's keys
and values never change once computed and a layer never gets back a position
it dropped, so the rows the branch's segments saved cover every position the
buffer holds at the branch's end: ``compose`` lays them into their slots.
A format-1 checkpoint is read the same way (``checkpoint_rows``), so a branch
whose older files are format 1 composes too. Which layers are kept as rows,
and where each slot of their buffer stands, are their rows' rules in
``kv/layers.py`` (``as_rows``, ``size``, ``slots``).
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
import numpy as np

from mlxchat.engine.disk.checks import CacheFileRejected
from mlxchat.engine.kv import layers

ROWS = ("w.0", "w.1")
"""A windowed layer's arrays in format 2: keys and values rows."""
Piece = tuple[np.ndarray, np.ndarray, np.ndarray]
"""(positions, keys rows, values rows): rows along the axis before the last."""


def windowed(c: Any) -> bool:
    """A layer saved as rows (a top-level window or chunked layer; one inside
    a ``CacheList`` keeps its whole checkpoint)."""
    return layers.row(c).as_rows


def is_rows(name: str) -> bool:
    """A tensor of a layer's rows (``I.w.J``, perhaps ``@END``)."""
    parts = name.split("@", 1)[0].split(".")
    return len(parts) == 3 and parts[1] == "w"


def slots(meta: dict[str, Any], size: int) -> np.ndarray:
    """The position each of a layer's ``size`` slots holds (-1: unused)."""
    return layers.by_name(meta).slots(meta, size)


def changed(c: Any, start: int, end: int) -> tuple[dict[str, mx.array], dict[str, Any]]:
    """What a segment of positions ``[start, end)`` keeps of a windowed layer:
    the rows of the positions in it the layer still holds, and its description
    (with ``size`` and those ``rows``)."""
    row = layers.row(c)
    meta = row.meta(c)
    if c.keys is None:
        return {}, meta
    size = row.size(c)
    pos = slots(meta, size)
    pick = np.nonzero((pos >= start) & (pos < end))[0]
    pick = pick[np.argsort(pos[pick], kind="stable")]
    index = mx.array(pick.astype(np.int32))
    arrays = {ROWS[0]: mx.take(c.keys, index, axis=-2), ROWS[1]: mx.take(c.values, index, axis=-2)}
    return arrays, {**meta, "size": size, "rows": _ranges(pos[pick])}


def _ranges(positions: np.ndarray) -> list[list[int]]:
    """Sorted positions as [first, end) runs."""
    out: list[list[int]] = []
    for p in positions.tolist():
        if out and out[-1][1] == p:
            out[-1][1] = p + 1
        else:
            out.append([p, p + 1])
    return out


def rows_piece(meta: dict[str, Any], keys: np.ndarray, values: np.ndarray) -> Piece:
    """A format-2 segment's rows of a layer, with their positions."""
    try:
        positions = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in meta["rows"]]
                                   or [np.zeros(0, np.int64)])
    except (KeyError, TypeError, ValueError):
        raise CacheFileRejected("damaged metadata") from None
    if positions.size != keys.shape[-2] or keys.shape[-2] != values.shape[-2]:
        raise CacheFileRejected("damaged header (rows that are not the metadata's)")
    return positions, keys, values


def checkpoint_rows(meta: dict[str, Any], keys: np.ndarray, values: np.ndarray) -> Piece:
    """A format-1 checkpoint (the whole buffer) as the rows it holds."""
    pos = slots(meta, keys.shape[-2])
    used = np.nonzero(pos >= 0)[0]
    return pos[used], keys[..., used, :], values[..., used, :]


def compose(meta: dict[str, Any], pieces: Sequence[Piece]) -> tuple[np.ndarray, np.ndarray]:
    """The layer's keys and values buffers at the end ``meta`` describes, each
    slot filled from the rows of the position it holds (later pieces first);
    CacheFileRejected when a position it holds is in no piece."""
    size = int(meta["size"])
    pos = slots(meta, size)
    positions = np.concatenate([p[0] for p in pieces])
    keys_all = np.concatenate([p[1] for p in pieces], axis=-2)
    values_all = np.concatenate([p[2] for p in pieces], axis=-2)
    where = dict(zip(positions.tolist(), range(len(positions))))  # the latest piece wins
    used = np.nonzero(pos >= 0)[0]
    try:
        index = np.array([where[p] for p in pos[used].tolist()], dtype=np.int64)
    except KeyError:
        raise CacheFileRejected("a window row the branch needs is in none of its files") from None
    keys = np.zeros((*keys_all.shape[:-2], size, keys_all.shape[-1]), keys_all.dtype)
    values = np.zeros((*values_all.shape[:-2], size, values_all.shape[-1]), values_all.dtype)
    keys[..., used, :] = keys_all[..., index, :]
    values[..., used, :] = values_all[..., index, :]
    return keys, values
