"""What every KV cache file shares (segments, pinned prefixes, old whole-cache
snapshots): the checks of a file's origin before it is trusted, the one error
for a file that cannot be used, and the words for a failed write."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable

from mlx_lm import __version__ as MLX_LM_VERSION


class CacheFileRejected(Exception):
    """A cache file (a KV segment, a pinned prefix, an old snapshot) cannot be
    used; str(exc) says why, in a few words."""


class CacheWriteError(OSError):
    """MLX could not write the file (it raises a bare RuntimeError): an OSError
    like any other failed write, with the reason in ``strerror``."""


def failure_words(exc: BaseException) -> str:
    """Why a cache file was not saved, in a few words for the stats line."""
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
    template and mlx-lm; else CacheFileRejected with the reason."""
    if not path.is_file():
        raise CacheFileRejected(f"file missing ({path.name})")
    if checksum_ok is not None and not checksum_ok():
        raise CacheFileRejected("checksum mismatch (file changed or damaged)")
    try:
        data, meta = load(str(path))
    except Exception as exc:  # mx.load raises bare RuntimeError/ValueError on damage
        raise CacheFileRejected(f"unreadable file ({type(exc).__name__})") from None
    problem = origin_problem(meta, fmt, what, fingerprint=fingerprint,
                             template_hash=template_hash)
    if problem:
        raise CacheFileRejected(problem)
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


def write_failed(exc: RuntimeError, folder: Path, needed: int) -> CacheWriteError:
    try:
        full = shutil.disk_usage(folder).free < max(needed, 1 << 20)
    except OSError:
        full = False
    if full:
        return CacheWriteError(errno.ENOSPC, "disk full", str(folder))
    if not os.access(folder, os.W_OK):
        return CacheWriteError(errno.EACCES, "read-only", str(folder))
    return CacheWriteError(errno.EIO, f"cannot write the snapshot ({exc})", str(folder))
