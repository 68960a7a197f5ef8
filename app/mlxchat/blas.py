"""An optimized BLAS under MLX on Linux, loaded before ``mlx.core`` (stdlib only).

The ``mlx-cpu`` wheel links the netlib reference BLAS; ``libmlx.so`` takes
``cblas_sgemm`` as an undefined symbol, so a BLAS loaded into the process's
global scope first serves every float32 matmul instead: 1.5-2.4 GFLOP/s
becomes 70-170 here (bench/cpu.py). ``ensure()`` runs when the ``mlxchat``
package is imported, so every entry point (the CLI, ``python -m mlxchat``,
the ranks of a split, the server, the benchmarks, the tests) has it before
MLX; on macOS it does nothing (Metal and Accelerate stay as they are).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from dataclasses import dataclass
from pathlib import Path

OVERRIDE = "MLXCHAT_BLAS"
"""A BLAS library's path to load instead of searching; ``none`` loads none."""
THREADS = "MLXCHAT_BLAS_THREADS"
"""Threads the BLAS may use; default: the cores this process may run on."""

_SYSTEM_OPENBLAS = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib64/libopenblasp.so.0", "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)
FIX = ("install OpenBLAS (Debian/Ubuntu: apt-get install libopenblas0-pthread; "
       "or pip install mkl) and restart")


@dataclass(frozen=True)
class BlasStatus:
    """Which BLAS serves MLX's float32 matmuls in this process."""

    name: str
    """'OpenBLAS 0.3.21', 'MKL', 'reference (netlib)', 'Accelerate'."""
    path: str | None
    """The library ``cblas_sgemm`` resolves to in the global scope, if any."""
    threads: int | None
    optimized: bool
    """True when an optimized BLAS really serves ``cblas_sgemm``."""
    note: str = ""
    """Why it is slow and how to fix it, when it is (one line)."""

    def words(self) -> str:
        if not self.optimized:
            return self.name
        threads = f", {self.threads} thread{'s' if self.threads != 1 else ''}" if self.threads else ""
        return f"{self.name}{threads}"


_status: BlasStatus | None = None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _threads() -> int:
    raw = os.environ.get(THREADS, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else _cores()


def _candidates() -> list[str]:
    """MKL in this environment (pip install mkl), then a system OpenBLAS."""
    found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so.*")))
    return found[-1:] + [p for p in _SYSTEM_OPENBLAS if os.path.exists(p)]


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def serving_library() -> str | None:
    """The file the global-scope ``cblas_sgemm`` comes from: the one libmlx's
    undefined symbol binds to (the global scope is searched before its own
    libraries). None: the wheel's bundled reference BLAS serves it."""
    try:
        symbol = ctypes.cast(ctypes.CDLL(None).cblas_sgemm, ctypes.c_void_p)
    except AttributeError:
        return None
    info = _DlInfo()
    if not ctypes.CDLL(None).dladdr(symbol, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(info.dli_fname.decode())


def _load(path: str, threads: int) -> str:
    """Load ``path`` globally with ``threads``; its name in words."""
    if "mkl" in Path(path).name:
        # The sequential layer needs no OpenMP runtime; one thread only.
        os.environ.setdefault("MKL_THREADING_LAYER", "SEQUENTIAL")
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        return "MKL"
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    name = "OpenBLAS"
    try:
        lib.openblas_set_num_threads(ctypes.c_int(threads))
        lib.openblas_get_config.restype = ctypes.c_char_p
        words = (lib.openblas_get_config() or b"").decode().split()
        if len(words) > 1 and words[0] == "OpenBLAS":
            name = f"OpenBLAS {words[1]}"
    except AttributeError:
        pass
    return name


def _find(threads: int) -> tuple[str, str] | tuple[None, str]:
    """(name, path) of the BLAS loaded, or (None, why none was)."""
    asked = os.environ.get(OVERRIDE, "").strip()
    if asked.lower() == "none":
        return None, f"{OVERRIDE}=none"
    paths = [asked] if asked else _candidates()
    if not paths:
        return None, "no optimized BLAS is installed"
    problems = []
    for path in paths:
        try:
            return _load(path, threads), path
        except OSError as exc:
            problems.append(f"{path}: {str(exc).splitlines()[0][:120]}")
    return None, "; ".join(problems)


def ensure() -> BlasStatus:
    """Load an optimized BLAS before MLX (once; idempotent) and say which serves it."""
    global _status
    if _status is not None:
        return _status
    if sys.platform == "darwin":
        _status = BlasStatus("Accelerate", None, None, True)
        return _status
    if not sys.platform.startswith("linux"):
        _status = BlasStatus("MLX's own", None, None, True)
        return _status
    if "mlx.core" in sys.modules and serving_library() is None:
        _status = BlasStatus("reference (netlib)", None, None, False,
                             "MLX was imported before mlxchat, so its reference BLAS serves "
                             f"it: import mlxchat first; {FIX}")
        return _status
    threads = _threads()
    name, found = _find(threads)
    served = serving_library()
    if name is None or served is None:
        why = found if name is None else f"{found} loaded but does not serve cblas_sgemm"
        _status = BlasStatus("reference (netlib)", None, None, False,
                             f"MLX on this CPU uses the reference BLAS ({why}): float "
                             f"matmuls run ~30x slower; {FIX}")
    else:
        _status = BlasStatus(name, served, 1 if name == "MKL" else threads, True)
    return _status


def status() -> BlasStatus:
    """What ``ensure()`` found (running it if nothing has yet)."""
    return ensure()


def warn_once(stream=None) -> None:
    """Say once, in one line, why MLX is slow here and how to fix it; not when
    the user chose no BLAS (``MLXCHAT_BLAS=none``): ``/stats`` and ``/model``
    still say which serves MLX, and a refusal of bad input stays one line."""
    current = status()
    chosen = os.environ.get(OVERRIDE, "").strip().lower() == "none"
    if current.note and not chosen and not getattr(warn_once, "said", False):
        warn_once.said = True  # type: ignore[attr-defined]
        print(f"mlxchat: {current.note}", file=stream or sys.stderr)
