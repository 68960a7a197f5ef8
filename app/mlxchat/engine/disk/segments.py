"""KV segments: the cache on disk one turn at a time.

A segment holds the keys and values of the positions ``[start, end)`` for the
layers that keep every position, the rows of those positions a sliding-window
or chunked layer still holds (``window_rows``), plus a checkpoint at ``end``
of the layers that cannot be sliced (recurrent states: small, fixed size);
``engine.layers`` says which is which and what each keeps. A branch's
segments laid end to end restore its cache; a turn writes only what it added.
Files are safetensors written here, so the checksum (``engine.checksum``) is
computed while writing and the file is never read back; ``branch_restore``
reads them (through ``segment_file``) and ``joiner`` joins a branch's
into one.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Sequence

import mlx.core as mx
import numpy as np
from mlx_lm import __version__ as MLX_LM_VERSION

from mlxchat.engine.disk import checks, window_rows
from mlxchat.engine.disk import checksum as checksum_of
from mlxchat.engine.disk.checks import write_failed
from mlxchat.engine.kv import layers, prompt_cache
from mlxchat.files import link_new
from mlxchat.paths import kv_temp_file

FORMAT = "mlxchat-kv-segment-2"
"""Written now: window and chunked layers as the rows a segment changed (``window_rows``)."""
WHOLE_WINDOWS = "mlxchat-kv-segment-1"
"""Written before: those layers' whole buffer at every segment's end; still read."""
READS = (FORMAT, WHOLE_WINDOWS)
_DTYPES = {mx.float16: "F16", mx.bfloat16: "BF16", mx.float32: "F32", mx.uint32: "U32",
           mx.int32: "I32", mx.uint8: "U8"}
_CHUNK = 8 << 20


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
    """Write positions ``[start, end)`` (and the checkpoints at ``end``) atomically
    to a new file: ``path``, or a fresh name beside it (the returned info's)."""
    tensors, described = {}, []
    for i, c in enumerate(cache):
        if window_rows.windowed(c):
            arrays, meta = window_rows.changed(c, start, end)
        else:
            arrays, meta = layers.row(c).arrays(c, start, end), layers.row(c).meta(c)
        tensors.update((f"{i}.{name}", a) for name, a in arrays.items())
        described.append(meta)
    mx.eval(list(tensors.values()))
    metadata = {"format": FORMAT, "mlx_lm_version": MLX_LM_VERSION,
                "model_fingerprint": fingerprint, "template_hash": template_hash,
                "start": str(start), "end": str(end), "tokens": json.dumps(list(tokens)),
                "layers": json.dumps(described)}
    checksum, size, path = write_durably(
        Path(path), lambda fh: _write_safetensors(fh, tensors, metadata),
        needed=sum(a.nbytes for a in tensors.values()))
    return SegmentInfo(path=str(path), start=start, end=end, bytes=size,
                       checksum=checksum, kv_bits=prompt_cache.bits(list(cache)))


def origin_problem(meta: dict[str, str], *, fingerprint: str, template_hash: str,
                   what: str = "an mlxchat KV segment") -> str | None:
    """Why a segment file's metadata says it was made for something else (any
    format this version reads), or None."""
    fmt = meta.get("format") if meta.get("format") in READS else FORMAT
    return checks.origin_problem(meta, fmt, what, fingerprint=fingerprint,
                                 template_hash=template_hash)


def write_durably(path: Path, fill: Callable[[BinaryIO], tuple[str, int]], *,
                  needed: int) -> tuple[str, int, Path]:
    """``fill(file)`` -> (checksum, size) run on a temp file beside ``path``, which
    takes ``path``'s name once its bytes are on disk (fsync, link, fsync of the
    folder), or a fresh name beside it when a file has that one: a file already
    there is never replaced (another row or database may own it), and a kill
    leaves a whole new file or none. Returns (checksum, size, the path taken)."""
    tmp = kv_temp_file(path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                checksum, size = fill(fh)
                fh.flush()
                os.fsync(fh.fileno())
            except RuntimeError as exc:  # a failed write below Python, as MLX reports it
                raise write_failed(exc, path.parent, needed)
        path = link_new(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return checksum, size, path


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
    hasher, head = write_header(fh, header)
    for host in hosts:
        view = memoryview(host).cast("B")
        for i in range(0, len(view), _CHUNK):
            chunk = view[i:i + _CHUNK]
            fh.write(chunk)
            hasher.update(chunk)
    return hasher.label(), head + offset


def write_header(fh: BinaryIO, header: dict[str, Any]) -> tuple[checksum_of.Hasher, int]:
    """Write a safetensors header; the checksum fed with it, and its size."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    hasher = checksum_of.Hasher()
    for piece in (struct.pack("<Q", len(raw)), raw):
        fh.write(piece)
        hasher.update(piece)
    return hasher, 8 + len(raw)
