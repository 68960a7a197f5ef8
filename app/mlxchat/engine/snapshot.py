"""Whole-cache KV snapshots, read only: sessions saved before KV segments
still resume from them. Also what cache files of both kinds share: the
checks of a file's origin, and the words for a failed write.

A snapshot is a safetensors file written by mlx-lm's ``save_prompt_cache``
(trimmed to the used length), with metadata naming everything the cache
depends on. Any mismatch or damage is a ``SnapshotRejected`` with a reason,
never a crash. Nothing writes them any more (KV segments replaced them).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm import __version__ as MLX_LM_VERSION
from mlx_lm.models.cache import load_prompt_cache

from mlxchat.engine import kv
from mlxchat.files import sha256_file

FORMAT = "mlxchat-kv-1"


class SnapshotRejected(Exception):
    """The snapshot cannot be used; str(exc) says why, in a few words."""


class SnapshotWriteError(OSError):
    """MLX could not write the file (it raises a bare RuntimeError): an OSError
    like any other failed write, with the reason in ``strerror``."""


def failure_words(exc: BaseException) -> str:
    """Why a snapshot was not saved, in a few words for the stats line."""
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOSPC:
            return "disk full"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return f"{exc.filename or 'the snapshot folder'} is read-only"
        if exc.errno in (errno.EEXIST, errno.ENOTDIR):
            return f"{exc.filename or 'the snapshot folder'} is not a folder"
        if exc.strerror:
            return exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return " ".join(str(exc).split()) or type(exc).__name__


def load_checked(path: Path, load: Callable[[str], tuple[Any, dict[str, str]]], fmt: str,
                 what: str, *, fingerprint: str, template_hash: str,
                 checksum_ok: Callable[[], bool] | None) -> tuple[Any, dict[str, str]]:
    """``load(path)`` -> (data, metadata) of a cache file, after checking it is
    there and undamaged, and before trusting it, that it was made for this model,
    template and mlx-lm; else SnapshotRejected with the reason."""
    if not path.is_file():
        raise SnapshotRejected(f"file missing ({path.name})")
    if checksum_ok is not None and not checksum_ok():
        raise SnapshotRejected("checksum mismatch (file changed or damaged)")
    try:
        data, meta = load(str(path))
    except Exception as exc:  # mx.load raises bare RuntimeError/ValueError on damage
        raise SnapshotRejected(f"unreadable file ({type(exc).__name__})") from None
    problem = origin_problem(meta, fmt, what, fingerprint=fingerprint,
                             template_hash=template_hash)
    if problem:
        raise SnapshotRejected(problem)
    return data, meta


def origin_problem(meta: dict[str, str], fmt: str, what: str, *, fingerprint: str,
                   template_hash: str) -> str | None:
    """Why a cache file's metadata says it was made for something else, or None."""
    if meta.get("format") != fmt:
        return f"not {what}"
    if meta.get("mlx_lm_version") != MLX_LM_VERSION:
        return f"written by mlx-lm {meta.get('mlx_lm_version')}, running {MLX_LM_VERSION}"
    if meta.get("model_fingerprint") != fingerprint:
        return layout_problem(str(meta.get("model_fingerprint")), fingerprint) \
            or "made with other model weights"
    if meta.get("template_hash") != template_hash:
        return "made with another chat template"
    return None


def layout_problem(stored: str, running: str) -> str | None:
    """The same weights split another way ('FINGERPRINT@tensor2r0': tensor
    parallel over 2 ranks, rank 0; no '@': one rank), in words; else None."""
    (base, _, made), (now_base, _, now) = stored.partition("@"), running.partition("@")
    if base != now_base:
        return None

    def words(layout: str) -> str:
        split = re.fullmatch(r"([a-z]+)(\d+)r(\d+)", layout)
        return (f"rank {split[3]} of {split[2]}, {split[1]} parallel" if split
                else "one rank" if not layout else layout)
    return f"made on another layout ({words(made)}; running {words(now)})"


def write_failed(exc: RuntimeError, folder: Path, needed: int) -> SnapshotWriteError:
    try:
        full = shutil.disk_usage(folder).free < max(needed, 1 << 20)
    except OSError:
        full = False
    if full:
        return SnapshotWriteError(errno.ENOSPC, "disk full", str(folder))
    if not os.access(folder, os.W_OK):
        return SnapshotWriteError(errno.EACCES, "read-only", str(folder))
    return SnapshotWriteError(errno.EIO, f"cannot write the snapshot ({exc})", str(folder))


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
    """Load and validate a snapshot, or raise SnapshotRejected with the reason."""
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
        raise SnapshotRejected("damaged metadata") from None
    if len(cache) != num_layers or kv.offset(cache) != len(tokens):
        raise SnapshotRejected("layer count or length does not match")
    # The file checksum already covers the tensors; without one, check them.
    if not expected_checksum and meta.get("tensor_sha256") != _tensor_digest(cache):
        raise SnapshotRejected("data damaged (tensor checksum mismatch)")
    return Snapshot(cache=cache, tokens=tokens, kv_bits=bits)
