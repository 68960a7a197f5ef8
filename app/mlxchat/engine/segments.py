"""KV segments: the cache on disk one turn at a time.

A segment holds the keys and values of the positions ``[start, end)`` for the
layers that keep every position, plus a checkpoint at ``end`` of the layers
that cannot be sliced (sliding windows, recurrent states: small, fixed size);
``engine.layers`` says which is which and what each keeps. A branch's
segments laid end to end restore its cache; a turn writes only what it added.
Files are safetensors written here, so the checksum (``engine.checksum``) is
computed while writing and the file is never read back.
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
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.engine import checksum as checksum_of
from mlxchat.engine import kv, layers
from mlxchat.engine.snapshot import SnapshotRejected, load_checked, write_failed
from mlxchat.paths import snapshot_temp_file

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


def write(path: Path, cache: Sequence[Any], start: int, end: int, tokens: Sequence[int], *,
          fingerprint: str, template_hash: str) -> SegmentInfo:
    """Write positions ``[start, end)`` (and the checkpoints at ``end``) atomically."""
    tensors = {f"{i}.{name}": a for i, c in enumerate(cache)
               for name, a in layers.row(c).arrays(c, start, end).items()}
    mx.eval(list(tensors.values()))
    metadata = {"format": FORMAT, "mlx_lm_version": MLX_LM_VERSION,
                "model_fingerprint": fingerprint, "template_hash": template_hash,
                "start": str(start), "end": str(end), "tokens": json.dumps(list(tokens)),
                "layers": json.dumps([layers.row(c).meta(c) for c in cache])}
    path = Path(path)
    tmp = snapshot_temp_file(path, os.getpid())
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
    return SegmentInfo(path=str(path), start=start, end=end, bytes=size,
                       checksum=checksum, kv_bits=kv.bits(list(cache)))


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
         checksum: Future[str] | None = None, verify: bool = True
         ) -> tuple[dict[str, mx.array], list[dict[str, Any]]]:
    """The arrays of one segment (read lazily, when evaluated) and its layer
    descriptions, or SegmentRejected. ``checksum`` is the file's checksum being
    computed (see ``checksums``); ``verify=False`` leaves checking it to the
    caller (``segment_restore``), who must before trusting the arrays."""
    arrays, meta = load_checked(
        ref.path, lambda p: mx.load(p, return_metadata=True), FORMAT, "an mlxchat KV segment",
        fingerprint=fingerprint, template_hash=template_hash,
        checksum_ok=None if not verify else
        lambda: (checksum.result() if checksum else _checksum_or_none(ref)) == ref.checksum)
    try:
        span = int(meta["start"]), int(meta["end"])
        tokens = [int(t) for t in json.loads(meta["tokens"])]
        described = json.loads(meta["layers"])
    except (KeyError, ValueError, TypeError):
        raise SegmentRejected("damaged metadata") from None
    if span != (ref.start, ref.end) or tokens != ref.token_ids:
        raise SegmentRejected("holds other tokens than the conversation")
    return arrays, described


def layout(piece: tuple[dict[str, mx.array], list[dict[str, Any]]]) -> list[tuple]:
    """Layer types and bit widths of a segment: consecutive segments must agree."""
    return [layers.layout(m) for m in piece[1]]


def assemble(model: Any, pieces: Sequence[tuple[dict[str, mx.array], list[dict[str, Any]]]],
             length: int) -> list[Any]:
    """A live cache from consecutive segments (the first starts at 0)."""
    cache = make_prompt_cache(model)
    last_layers = pieces[-1][1]
    if len(last_layers) != len(cache):
        raise SegmentRejected("layer count does not match the model")
    runs = [_by_layer(arrays) for arrays, _ in pieces]
    out = []
    for i, (fresh, meta) in enumerate(zip(cache, last_layers)):
        row = layers.restoring(meta, fresh)
        if row is None:
            raise SegmentRejected("cache types do not match the model")
        out.append(row.restore(meta, [run.get(i, {}) for run in runs], length, into=fresh))
    return out


def _by_layer(arrays: dict[str, mx.array]) -> dict[int, dict[str, mx.array]]:
    """A segment's arrays by layer index, each under its name within the layer."""
    out: dict[int, dict[str, mx.array]] = {}
    for name, a in arrays.items():
        i, _, own = name.partition(".")
        out.setdefault(int(i), {})[own] = a
    return out
