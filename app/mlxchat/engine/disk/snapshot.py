"""Whole-cache KV snapshots, read only: sessions saved before KV segments
still resume from them. Nothing writes them any more (KV segments replaced them).

A snapshot is a safetensors file written by mlx-lm's ``save_prompt_cache``
(trimmed to the used length), with metadata naming everything the cache
depends on. Any mismatch or damage is a ``CacheFileRejected`` with a reason,
never a crash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models.cache import load_prompt_cache

from mlxchat.engine.disk.checks import CacheFileRejected, load_checked
from mlxchat.engine.kv import prompt_cache
from mlxchat.files import sha256_file

FORMAT = "mlxchat-kv-1"


@dataclass
class Snapshot:
    cache: list[Any]
    tokens: list[int]
    kv_bits: int | None


def _tensor_digest(cache: list[Any]) -> str:
    """sha256 over every array's bytes, so damage inside the data is caught."""
    h = hashlib.sha256()
    for name, arr in tree_flatten([c.state for c in cache]):
        if isinstance(arr, mx.array):
            h.update(name.encode())
            h.update(memoryview(np.ascontiguousarray(arr.view(mx.uint8) if arr.dtype == mx.bfloat16
                                           else arr)).cast("B"))
    return h.hexdigest()


def load(path: Path, *, fingerprint: str, template_hash: str, num_layers: int,
         expected_checksum: str | None = None) -> Snapshot:
    """Load and validate a snapshot, or raise CacheFileRejected with the reason."""
    path = Path(path)
    cache, meta = load_checked(
        path, lambda p: load_prompt_cache(p, return_metadata=True), FORMAT,
        "an mlxchat snapshot", fingerprint=fingerprint, template_hash=template_hash,
        checksum_ok=(lambda: sha256_file(path) == expected_checksum)
        if expected_checksum else None)
    try:
        tokens = [int(t) for t in json.loads(meta["tokens"])]
        bits = int(meta["kv_bits"]) or None
    except (KeyError, ValueError, TypeError):
        raise CacheFileRejected("damaged metadata") from None
    if len(cache) != num_layers or prompt_cache.offset(cache) != len(tokens):
        raise CacheFileRejected("layer count or length does not match")
    # The file checksum already covers the tensors; without one, check them.
    if not expected_checksum and meta.get("tensor_sha256") != _tensor_digest(cache):
        raise CacheFileRejected("data damaged (tensor checksum mismatch)")
    return Snapshot(cache=cache, tokens=tokens, kv_bits=bits)
