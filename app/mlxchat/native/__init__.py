"""mlxchat's native CPU kernels: an MLX extension built from ``src/`` by
``make model`` (``python -m mlxchat.native``), loaded when present.

Never required: on macOS it is not built (Metal and Accelerate serve there);
on Linux, without a compiler, after a failed build or with a build made for
another MLX version (or other sources), the app computes as before and
``status().note`` says, in one line, why decode is slow and how to fix it.
``MLXCHAT_NATIVE=0`` turns the kernels off.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any

from mlxchat.native import build as _build

OFF = "MLXCHAT_NATIVE"
"""``0`` leaves the kernels unloaded (MLX's own quantized_matmul serves)."""
FIX = "run `make model` (needs g++; cmake, ninja and nanobind come from PyPI)"


@dataclass(frozen=True)
class NativeStatus:
    """Whether the native kernels serve this process, and if not why."""

    available: bool
    isa: str = ""
    """The instruction set the kernels run in: avx512, avx2, generic."""
    threads: int = 0
    note: str = ""
    """Why decode is slow and how to fix it, when it is (one line); empty on
    macOS and when the user turned the kernels off."""

    def words(self) -> str:
        if self.available:
            return f"{self.isa}, {self.threads} thread{'s' if self.threads != 1 else ''}"
        return "not loaded"


_state: dict[str, Any] = {}


def decide(platform: str, wanted: str, built: bool, others: list[str],
           compiler: str | None, mlx: str = "") -> NativeStatus | None:
    """Why the module is not loaded (a status), or None when it should be:
    the decision alone, from what was found."""
    if not platform.startswith("linux"):
        return NativeStatus(False)  # macOS: Metal and Accelerate; nothing to say
    if wanted.strip() == "0":
        return NativeStatus(False)  # the user's choice: /model still says which serves
    if built:
        return None
    slow = "decode runs on MLX's scalar quantized_matmul, several times slower: "
    if others:
        built_for = others[0].split("-", 1)[0].removeprefix("mlx")
        why = (f"the native kernel was built for MLX {built_for}, not {mlx}" if built_for != mlx
               else "the native kernel was built from other sources")
    elif compiler is None:
        why = "the native kernel is not built and no C++ compiler was found"
    else:
        why = "the native kernel is not built"
    return NativeStatus(False, note=f"{slow}{why}; {FIX}")


def _refused() -> tuple[Any, NativeStatus | None]:
    """(the built file, None) or (None, why it is not loaded): no MLX import."""
    path = _build.find_built() if sys.platform.startswith("linux") else None
    others = _build.other_builds() if path is None and sys.platform.startswith("linux") else []
    compiler = _build.compiler() if path is None and not others else "unchecked"
    return path, decide(sys.platform, os.environ.get(OFF, ""), path is not None, others, compiler,
                        _build.mlx_version())


def _load() -> tuple[Any, NativeStatus]:
    path, refused = _refused()
    if refused is not None:
        return None, refused
    _state["key"] = path.parent.name
    try:
        import mlx.core  # noqa: F401 - the extension's types live in mlx.core's domain

        spec = importlib.util.spec_from_file_location(_build.MODULE, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError) as exc:
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        return None, NativeStatus(False, note="decode runs on MLX's scalar quantized_matmul, "
                                  f"several times slower: the native kernel did not load "
                                  f"({reason}); {FIX}")
    return module, NativeStatus(True, isa=module.qmm_isa(), threads=module.threads())


def module() -> Any | None:
    """The loaded extension module, or None (loaded once per process)."""
    if "module" not in _state:
        _state["module"], _state["status"] = _load()
    return _state["module"]


def status() -> NativeStatus:
    module()
    return _state["status"]


def build_key() -> str:
    """The loaded build's key (MLX version, Python, platform, sources' hash);
    empty when none is loaded."""
    return _state.get("key", "") if module() is not None else ""


def warn_once(stream=None) -> None:
    """Say once, in one line, why decode is slow here and how to fix it (from
    what is on disk: MLX is not imported for it; a build that fails to load is
    named by ``status()`` in /model and the turn's stats)."""
    current = _state.get("status") or _refused()[1] or NativeStatus(True)
    if current.note and not _state.get("said"):
        _state["said"] = True
        print(f"mlxchat: {current.note}", file=stream or sys.stderr)
