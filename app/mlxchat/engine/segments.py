"""KV segments: the cache on disk one turn at a time.

A segment holds the keys and values of the positions ``[start, end)`` for the
layers that grow with the sequence (``KVCache``, ``QuantizedKVCache``), plus a
checkpoint at ``end`` of the layers that cannot be sliced (sliding-window
``RotatingKVCache`` windows, recurrent ``ArraysCache`` states: small, fixed
size). A branch's segments laid end to end restore its cache; a turn writes
only what it added. Files are safetensors written here, so the checksum
(``engine.checksum``) is computed while writing and the file is never read back.
"""

from __future__ import annotations

import json
import os
import struct
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Sequence

import mlx.core as mx
import numpy as np
from mlx_lm import __version__ as MLX_LM_VERSION
from mlxchat.engine import checksum as checksum_of
from mlxchat.engine.snapshot import SnapshotRejected, load_checked, write_failed
from mlx_lm.models.cache import (ArraysCache, KVCache, QuantizedKVCache, RotatingKVCache,
                                 make_prompt_cache)

FORMAT = "mlxchat-kv-segment-1"
_DTYPES = {mx.float16: "F16", mx.bfloat16: "BF16", mx.float32: "F32", mx.uint32: "U32",
           mx.int32: "I32", mx.uint8: "U8"}
_CHUNK = 8 << 20
_HASHERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mlxchat-hash")


SegmentRejected = SnapshotRejected
"""A segment cannot be used; str(exc) says why, in a few words."""


@dataclass
class SegmentInfo:
    """A segment written to disk."""

    path: str
    start: int
    end: int
    bytes: int
    checksum: str
    """Of the whole file (``engine.checksum``)."""
    kv_bits: int | None
    mlx_lm_version: str = MLX_LM_VERSION


@dataclass
class SegmentRef:
    """What the store knows of a segment: enough to check it before use."""

    path: Path
    start: int
    end: int
    checksum: str
    token_ids: list[int]


# -- writing ------------------------------------------------------------------------


def _host(arr: mx.array) -> np.ndarray:
    if arr.dtype == mx.bfloat16:
        arr = arr.view(mx.uint16)
    return np.ascontiguousarray(np.array(arr, copy=False))


def sliceable(c: Any) -> bool:
    """The layer keeps every position (any span of it can be cut out); sliding
    windows and recurrent states are saved whole instead."""
    return isinstance(c, (KVCache, QuantizedKVCache)) and not isinstance(c, RotatingKVCache)


def _layer_tensors(i: int, c: Any, start: int, end: int) -> dict[str, mx.array]:
    """The arrays a segment keeps of layer ``i``."""
    if sliceable(c):
        if c.keys is None:
            return {}
        out = {}
        for name, part in (("k", c.keys), ("v", c.values)):
            parts = part if isinstance(part, (tuple, list)) else (part,)
            for j, a in enumerate(parts):
                out[f"{i}.{name}.{j}"] = a[..., start:end, :]
        return out
    # A checkpoint of a layer that cannot be sliced: its whole state at ``end``.
    if isinstance(c, RotatingKVCache):
        flat = [c.keys, c.values] if c.keys is not None else []
    elif isinstance(c, ArraysCache):
        flat = [a for a in c.cache if a is not None]
    else:
        raise ValueError(f"cannot save a {type(c).__name__} layer")
    return {f"{i}.s.{j}": a for j, a in enumerate(flat)}


def _layer_meta(c: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"type": type(c).__name__}
    if isinstance(c, QuantizedKVCache):
        meta.update(bits=c.bits, group=c.group_size)
    elif isinstance(c, RotatingKVCache):
        meta["meta"] = [int(c.offset), int(c.keep), int(c.max_size), int(c._idx)]
    elif isinstance(c, ArraysCache):
        meta["slots"] = [a is not None for a in c.cache]
    return meta


def write(path: Path, layers: Sequence[Any], start: int, end: int, tokens: Sequence[int], *,
          fingerprint: str, template_hash: str) -> SegmentInfo:
    """Write positions ``[start, end)`` (and the checkpoints at ``end``) atomically."""
    tensors: dict[str, mx.array] = {}
    for i, c in enumerate(layers):
        tensors.update(_layer_tensors(i, c, start, end))
    mx.eval(list(tensors.values()))
    metadata = {"format": FORMAT, "mlx_lm_version": MLX_LM_VERSION,
                "model_fingerprint": fingerprint, "template_hash": template_hash,
                "start": str(start), "end": str(end), "tokens": json.dumps(list(tokens)),
                "layers": json.dumps([_layer_meta(c) for c in layers])}
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.safetensors")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                checksum, size = _write_safetensors(fh, tensors, metadata)
                fh.flush()
                os.fsync(fh.fileno())
            except RuntimeError as exc:  # a failed write below Python, as MLX reports it
                raise write_failed(exc, path.parent, sum(a.nbytes for a in tensors.values()))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    bits = next((c.bits for c in layers if isinstance(c, QuantizedKVCache)), None)
    return SegmentInfo(path=str(path), start=start, end=end, bytes=size,
                       checksum=checksum, kv_bits=bits)


def _write_safetensors(fh: BinaryIO, tensors: dict[str, mx.array],
                       metadata: dict[str, str]) -> tuple[str, int]:
    header: dict[str, Any] = {"__metadata__": metadata}
    hosts, offset = [], 0
    for name, arr in tensors.items():
        host = _host(arr)
        header[name] = {"dtype": _DTYPES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + host.nbytes]}
        offset += host.nbytes
        hosts.append(host)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    hasher = checksum_of.Hasher()
    for piece in (struct.pack("<Q", len(raw)), raw):
        fh.write(piece)
        hasher.update(piece)
    for host in hosts:
        view = memoryview(host).cast("B")
        for i in range(0, len(view), _CHUNK):
            chunk = view[i:i + _CHUNK]
            fh.write(chunk)
            hasher.update(chunk)
    return hasher.label(), 8 + len(raw) + offset


# -- reading --------------------------------------------------------------------------


def checksums(refs: Sequence[SegmentRef]) -> list[Future[str]]:
    """Start the files' checksums in threads (the hashes let go of the GIL), so
    they overlap with MLX reading the same files on the engine thread."""
    return [_HASHERS.submit(_checksum_or_none, ref) for ref in refs]


def _checksum_or_none(ref: SegmentRef) -> str:
    try:
        return checksum_of.of_file(ref.path, ref.checksum)
    except OSError:
        return ""


def read(ref: SegmentRef, *, fingerprint: str, template_hash: str,
         crc: Future[str] | None = None, verify: bool = True
         ) -> tuple[dict[str, mx.array], list[dict[str, Any]]]:
    """The arrays of one segment (read lazily, when evaluated) and its layer
    descriptions, or SegmentRejected. ``crc`` is the file's checksum being
    computed (see ``checksums``); ``verify=False`` leaves checking it to the
    caller (``segment_restore``), who must before trusting the arrays."""
    arrays, meta = load_checked(
        ref.path, lambda p: mx.load(p, return_metadata=True), FORMAT, "an mlxchat KV segment",
        fingerprint=fingerprint, template_hash=template_hash,
        checksum_ok=None if not verify else
        lambda: (crc.result() if crc else _checksum_or_none(ref)) == ref.checksum)
    try:
        span = int(meta["start"]), int(meta["end"])
        tokens = [int(t) for t in json.loads(meta["tokens"])]
        layers = json.loads(meta["layers"])
    except (KeyError, ValueError, TypeError):
        raise SegmentRejected("damaged metadata") from None
    if span != (ref.start, ref.end) or tokens != ref.token_ids:
        raise SegmentRejected("holds other tokens than the conversation")
    return arrays, layers


def layout(piece: tuple[dict[str, mx.array], list[dict[str, Any]]]) -> list[tuple]:
    """Layer types and bit widths of a segment: consecutive segments must agree."""
    return [(m["type"], m.get("bits"), m.get("group")) for m in piece[1]]


def assemble(model: Any, pieces: Sequence[tuple[dict[str, mx.array], list[dict[str, Any]]]],
             length: int) -> list[Any]:
    """A live cache from consecutive segments (the first starts at 0)."""
    cache = make_prompt_cache(model)
    last_arrays, last_layers = pieces[-1]
    if len(last_layers) != len(cache):
        raise SegmentRejected("layer count does not match the model")
    for i, (c, meta) in enumerate(zip(cache, last_layers)):
        if meta["type"] in ("KVCache", "QuantizedKVCache"):
            cache[i] = _concat_layer(i, meta, pieces, length)
        elif meta["type"] == "RotatingKVCache" and isinstance(c, RotatingKVCache):
            offset, keep, max_size, idx = meta["meta"]
            keys, values = (last_arrays.get(f"{i}.s.0"), last_arrays.get(f"{i}.s.1"))
            c.state = (keys, values, offset, keep, max_size, idx)
        elif meta["type"] == "ArraysCache" and isinstance(c, ArraysCache):
            arrays = iter(last_arrays[f"{i}.s.{j}"] for j in range(sum(meta["slots"])))
            c.cache = [next(arrays) if present else None for present in meta["slots"]]
        else:
            raise SegmentRejected("cache types do not match the model")
    return cache


def _concat_layer(i: int, meta: dict[str, Any], pieces: Sequence[tuple[dict, list]],
                  length: int) -> Any:
    quantized = meta["type"] == "QuantizedKVCache"
    layer = (QuantizedKVCache(group_size=meta["group"], bits=meta["bits"]) if quantized
             else KVCache())
    parts = 3 if quantized else 1
    for name in ("k", "v"):
        joined = []
        for j in range(parts):
            runs = [arrays[f"{i}.{name}.{j}"] for arrays, _ in pieces]
            joined.append(mx.concatenate(runs, axis=-2) if len(runs) > 1 else runs[0])
        value = tuple(joined) if quantized else joined[0]
        setattr(layer, "keys" if name == "k" else "values", value)
    layer.offset = length
    return layer
