"""Whole-cache KV snapshots as mlxchat wrote and recorded them before KV
segments, for the tests of what still reads them (sessions saved back then
must resume). The app no longer writes this format; this is its writer, kept
as it was: mlx-lm's ``save_prompt_cache`` of the cache cut to its used length
with mlxchat's metadata, written privately and renamed into place, and the
row the store kept of it. The tensor digest is copied here on purpose: a
change to the reader's must fail these tests, as real old files would.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm import __version__ as MLX_LM_VERSION
from mlx_lm.models.cache import save_prompt_cache

from mlxchat import paths
from mlxchat.engine.core import ChatEngine
from mlxchat.files import sha256_file
from mlxchat.store import SessionStore

FORMAT = "mlxchat-kv-1"


def _tensor_digest(cache: list[Any]) -> str:
    """sha256 over every array's name and bytes, as the old writer computed it."""
    h = hashlib.sha256()
    for name, arr in tree_flatten([c.state for c in cache]):
        if isinstance(arr, mx.array):
            h.update(name.encode())
            h.update(memoryview(np.ascontiguousarray(
                arr.view(mx.uint8) if arr.dtype == mx.bfloat16 else arr)).cast("B"))
    return h.hexdigest()


@dataclass
class SnapshotInfo:
    """An old whole-cache KV snapshot written to disk."""

    path: str
    bytes: int
    checksum: str
    """sha256 of the file."""
    tokens: int
    mlx_lm_version: str
    kv_bits: int | None = None


def write_old_snapshot(engine: ChatEngine, path: Path) -> SnapshotInfo:
    """The engine's live cache written as a whole-cache snapshot file."""
    view = engine.live_view()
    if not view.tokens:
        raise ValueError("the KV cache is empty: nothing to save")
    assert view.length == len(view.tokens), "cache and token list disagree"
    path = Path(path)
    paths.ensure_private_dir(path.parent)
    cache = view.cache()  # cut to the used length, as the old writer cut it
    mx.eval([c.state for c in cache])
    metadata = {
        "format": FORMAT,
        "mlx_lm_version": MLX_LM_VERSION,
        "model_fingerprint": engine.info.fingerprint,
        "template_hash": engine.info.chat_template_hash,
        "kv_bits": str(view.bits or 0),
        "tokens": json.dumps(list(view.tokens)),
        "tensor_sha256": _tensor_digest(cache),
    }
    tmp = paths.kv_temp_file(path, os.getpid())
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        save_prompt_cache(str(tmp), cache, metadata)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return SnapshotInfo(path=str(path), bytes=path.stat().st_size, checksum=sha256_file(path),
                        tokens=len(view.tokens), mlx_lm_version=MLX_LM_VERSION, kv_bits=view.bits)


def record_old_snapshot(store: SessionStore, session_id: int, leaf_id: int | None,
                        path: Path | str, *, sha256: str, token_count: int, file_bytes: int,
                        mlx_lm_version: str, kv_bits: int | None = None) -> None:
    """The row the store kept of a snapshot file (its path relative to the data folder)."""
    name = paths.kv_file_name(path)
    assert name is not None, f"{path} is not in {paths.kv_dir()}"
    with store.db.writing() as cur:  # noqa: SLF001 - a row as an older mlxchat wrote it
        cur.execute(
            "INSERT INTO snapshots (session_id, leaf_id, path, sha256, token_count, file_bytes,"
            " mlx_lm_version, kv_bits, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, leaf_id, name, sha256, token_count, file_bytes, mlx_lm_version,
             kv_bits, time.time()))


# -- KV segments of format 1 (a window's whole buffer at every segment's end) ------------

OLD_SEGMENT_FORMAT = "mlxchat-kv-segment-1"
_OLD_DTYPES = {mx.float16: "F16", mx.bfloat16: "BF16", mx.float32: "F32", mx.uint32: "U32",
               mx.int32: "I32", mx.uint8: "U8"}


def _old_layer(c: Any, start: int, end: int) -> tuple[dict[str, mx.array], dict[str, Any]]:
    """What format 1 kept of a layer: a window's or a chunk's whole buffer, as
    the writer of then did; other layers as the table says (unchanged)."""
    from mlx_lm.models.cache import ChunkedKVCache, RotatingKVCache

    from mlxchat.engine.kv import layers

    if type(c) is RotatingKVCache:
        meta = {"type": "RotatingKVCache",
                "meta": [int(c.offset), int(c.keep), int(c.max_size), int(c._idx)]}
        return ({} if c.keys is None else {"s.0": c.keys, "s.1": c.values}), meta
    if type(c) is ChunkedKVCache:
        held = int(c.offset) - int(c.start_position)
        meta = {"type": "ChunkedKVCache",
                "meta": [int(c.offset), int(c.chunk_size), int(c.start_position)]}
        return ({} if c.keys is None else {"s.0": c.keys[..., :held, :],
                                           "s.1": c.values[..., :held, :]}), meta
    return layers.row(c).arrays(c, start, end), layers.row(c).meta(c)


def write_old_segment(path: Path, cache: list[Any], start: int, end: int, tokens: list[int], *,
                      fingerprint: str, template_hash: str) -> tuple[str, int]:
    """A format-1 segment of positions ``[start, end)``: (its checksum, its size)."""
    from mlxchat.engine.disk.segments import write_durably, write_header

    tensors, described = {}, []
    for i, c in enumerate(cache):
        arrays, meta = _old_layer(c, start, end)
        tensors.update((f"{i}.{name}", a) for name, a in arrays.items())
        described.append(meta)
    mx.eval(list(tensors.values()))
    metadata = {"format": OLD_SEGMENT_FORMAT, "mlx_lm_version": MLX_LM_VERSION,
                "model_fingerprint": fingerprint, "template_hash": template_hash,
                "start": str(start), "end": str(end), "tokens": json.dumps(list(tokens)),
                "layers": json.dumps(described)}

    def fill(fh):
        header: dict[str, Any] = {"__metadata__": metadata}
        hosts, offset = [], 0
        for name, arr in tensors.items():
            host = np.ascontiguousarray(np.array(
                arr.view(mx.uint16) if arr.dtype == mx.bfloat16 else arr, copy=False))
            header[name] = {"dtype": _OLD_DTYPES[arr.dtype], "shape": list(arr.shape),
                            "data_offsets": [offset, offset + host.nbytes]}
            offset += host.nbytes
            hosts.append(host)
        hasher, head = write_header(fh, header)
        for host in hosts:
            data = host.tobytes()
            fh.write(data)
            hasher.update(data)
        return hasher.label(), head + offset

    return write_durably(Path(path), fill, needed=sum(a.nbytes for a in tensors.values()))
