"""numpy's own BLAS held to few threads while the embedder runs on it.

numpy's wheel bundles its own OpenBLAS (not the one ``mlxchat.blas`` loads for
MLX), which starts a thread per core and spins at its barriers. The
embedder's products are small (a slice of chunks a few hundred tokens wide),
so the threads mostly wait on each other, and when anything else wants a core
(the UI, the model, other programs) a spinning thread holds it. Measured on
this shared 2-core Linux machine (load 6-7, ``bench/embed_threads.py``, best
of two alternating rounds): 5 notes of ~1.5 kB (10 chunks) took 11.9 s on 2
threads and 1.2 s on one (10x); 16 notes (53 chunks) 15.7 s against 5.7 s.
In the app, ``/docs add`` of those 5 notes went from 9.1-9.9 s to 1.7-2.8 s,
loading the embedder included. ``MLXCHAT_EMBED_THREADS`` gives it more threads
where cores are free.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import numpy as np

THREADS = "MLXCHAT_EMBED_THREADS"
"""Threads numpy's BLAS may use while embedding (default 1)."""
_SETTERS = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
            ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
            ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
            ("openblas_set_num_threads", "openblas_get_num_threads"))


def embed_threads() -> int:
    raw = os.environ.get(THREADS, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


@lru_cache(maxsize=1)
def _numpy_openblas() -> tuple[ctypes._CFuncPtr, ctypes._CFuncPtr] | None:
    """(set, get) of the thread count of the OpenBLAS numpy's wheel bundles;
    None where numpy uses another BLAS (then nothing is changed)."""
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for path in sorted(glob.glob(str(libs / "*openblas*.so*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in _SETTERS:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                return getattr(lib, set_name), getattr(lib, get_name)
    return None


@contextmanager
def blas_threads(threads: int | None = None) -> Iterator[None]:
    """numpy's BLAS on ``threads`` (default ``embed_threads()``) within the block."""
    found = _numpy_openblas()
    if found is None:
        yield
        return
    set_threads, get_threads = found
    before = get_threads()
    set_threads(threads or embed_threads())
    try:
        yield
    finally:
        set_threads(before)
