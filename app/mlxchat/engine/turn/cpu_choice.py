"""``cpu_matmul=auto``: each quantized layer shape computed the fastest way this
CPU has, decided by measuring (models/cpu_matmul.py holds the paths).

Once per model and machine, one layer of each shape is timed: a decode step
(one row) with ``quantized_matmul``, the native SIMD kernel (mlxchat.native,
where it is built and takes the layer) in float32 and with int8 activations,
and a kept float32 copy through the BLAS; a prefill chunk with
``quantized_matmul``, dequantize-then-matmul, the native kernel (both ways)
and the kept copy. ``auto`` chooses among the exact paths; ``int8`` the same
way with the int8 kernel among them (it rounds the activations: the bundled
model's greedy answer to a question can change where two tokens nearly tie). One plan per machine: the figures are stored per layer shape
(any model with that shape reuses them, never timed again at a load) in a file
of the native build's own (``plan_file``: another MLX version or other kernel
sources build anew, so measure anew), under the machine they were taken on
(cores, CPU, BLAS, MLX version, the kernel's instruction set): a changed
machine measures again. Kept copies
cost 4 bytes a weight and are made only where they beat both quantized paths
by a tenth, within what the memory fit leaves (RAM available now, less the KV cache at
the model's whole context, less a margin), the biggest saving per byte first.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path as FilePath
from typing import Any, Callable

import mlx.core as mx

from mlxchat import blas, native
from mlxchat.chat import human_bytes
from mlxchat.files import write_private_text
from mlxchat.models import LoadedModel, memory
from mlxchat.models import cpu_matmul as cm
from mlxchat.models.info import on_cpu
from mlxchat.paths import cache_dir

PREFILL_ROWS = 128
"""Rows of the prefill chunk the BLAS paths are timed at."""
QUANTIZED_ROWS = 16
"""quantized_matmul is compute-bound (linear in rows): timed at this many, scaled."""
MARGIN_BYTES = 512 << 20
"""Left free beyond the KV cache at the whole context."""
FORMAT = 4
NEVER = float("inf")
"""The time of a path that cannot serve the shape (the native kernel unbuilt)."""
_MEASURED: dict[tuple[str, str], dict[str, "ShapeTimes"]] = {}
"""This process's figures by (plan file, machine), per shape: a shape measures
once per process and file."""


@dataclass(frozen=True)
class ShapeTimes:
    """Seconds per call of one layer shape, measured."""

    decode_quantized: float
    decode_kept: float
    prefill_quantized: float
    prefill_dequantized: float
    prefill_kept: float
    decode_native: float = NEVER
    prefill_native: float = NEVER
    decode_int8: float = NEVER
    prefill_int8: float = NEVER

    def decode_free(self, int8: bool = False) -> tuple[str, float]:
        """The fastest decode path that keeps no copy, and its time; the int8
        kernel among them only when ``int8`` (it rounds the activations)."""
        options = {cm.QUANTIZED: self.decode_quantized, cm.NATIVE: self.decode_native,
                   cm.INT8: self.decode_int8 if int8 else NEVER}
        best = min(options, key=options.__getitem__)
        return best, options[best]

    def prefill_free(self, mode: str) -> str:
        """The fastest prefill path that keeps no copy (the BLAS for 'dequantized';
        the int8 kernel among them for 'int8')."""
        if mode == "dequantized":
            return cm.DEQUANTIZED
        options = {cm.QUANTIZED: self.prefill_quantized, cm.DEQUANTIZED: self.prefill_dequantized,
                   cm.NATIVE: self.prefill_native,
                   cm.INT8: self.prefill_int8 if mode == cm.INT8 else NEVER}
        return min(options, key=options.__getitem__)


@dataclass(frozen=True)
class MatmulPlan:
    """What every quantized layer of the model computes with, and why."""

    mode: str
    paths: dict[str, cm.Path] = field(default_factory=dict)
    layers: dict[str, int] = field(default_factory=dict)
    kept_bytes: int = 0
    measured: bool = False
    """True when this load measured a shape (False: all from the stored plan)."""
    note: str = ""

    def words(self) -> str:
        if not self.paths:
            return self.note or "quantized_matmul (no quantized layers)"
        shapes = len(self.paths)
        def count(where: str, path: str) -> int:
            return sum(1 for p in self.paths.values() if getattr(p, where) == path)
        prefill = count("prefill", cm.DEQUANTIZED) + count("prefill", cm.KEPT)
        decode = count("decode", cm.KEPT)
        kept = f" (+{human_bytes(self.kept_bytes)})" if self.kept_bytes else ""
        origin = "" if self.mode == "quantized" else (
            " (measured now)" if self.measured else " (this machine's stored plan)")
        text = (f"{self.mode}{origin}: prefill through the BLAS for {prefill} of {shapes} layer "
                f"shapes, decode from float32 copies for {decode} of {shapes}{kept}")
        for path, what in ((cm.NATIVE, "native kernel"), (cm.INT8, "int8 kernel")):
            if count("decode", path) or count("prefill", path):
                text += (f", {what} for decode in {count('decode', path)} and prefill "
                         f"in {count('prefill', path)} of {shapes}")
        return text + (f"; {self.note}" if self.note else "")


def machine() -> str:
    """What the figures depend on besides the model."""
    status = blas.status()
    cpu = platform.processor() or platform.machine()
    try:
        for line in FilePath("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{blas._cores()} cores · {cpu} · {status.words()} · mlx {mx.__version__}"
            f" · native kernel {native.status().words()}")


def _best(fn: Callable[[], mx.array], reps: int = 3) -> float:
    t0 = time.perf_counter()
    mx.eval(fn())  # warm-up: kernels, allocations
    best = float("inf") if time.perf_counter() - t0 < 0.1 else time.perf_counter() - t0
    for _ in range(reps if best == float("inf") else 1):
        t0 = time.perf_counter()
        mx.eval(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def measure_shape(layer: Any) -> ShapeTimes:
    """Time one layer on each path (its own path is restored after)."""
    width = layer.weight.shape[-1] * 32 // layer.bits
    # Looked up at each call: set_path swaps the layer's class.
    head = hasattr(layer, "as_linear")
    call = (lambda x: layer.as_linear(x)) if head else layer
    one, chunk = mx.random.normal((1, width)), mx.random.normal((PREFILL_ROWS, width))
    few = chunk[:QUANTIZED_ROWS]
    saved = layer.__dict__.get("_cpu_path") or cm.Path()
    kept = layer.__dict__.get("_cpu_kept")
    try:
        cm.set_path(layer, cm.Path())
        q1 = _best(lambda: call(one))
        # A head's prefill rows are never computed (a chunk evaluates the cache
        # only) and its chunk is the dearest to time: scaled from one row.
        qn = q1 * QUANTIZED_ROWS if head else _best(lambda: call(few))
        cm.set_path(layer, cm.Path(prefill=cm.DEQUANTIZED))
        dn = _best(lambda: call(chunk))
        cm.set_path(layer, cm.Path(prefill=cm.KEPT, decode=cm.KEPT))
        k1, kn = _best(lambda: call(one)), _best(lambda: call(chunk))
        kernel = {p: (NEVER, NEVER) for p in cm.KERNEL}
        for path in cm.KERNEL if cm.native_takes(layer) else ():
            cm.set_path(layer, cm.Path(prefill=path, decode=path))
            n1 = _best(lambda: call(one))
            kernel[path] = n1, n1 * PREFILL_ROWS if head else _best(lambda: call(chunk))
    finally:
        cm.set_path(layer, cm.Path())
        if kept is not None:
            layer.__dict__["_cpu_kept"] = kept
        cm.set_path(layer, saved)
    return ShapeTimes(q1, k1, qn * PREFILL_ROWS / QUANTIZED_ROWS, dn, kn, *kernel[cm.NATIVE],
                      *kernel[cm.INT8])


def plan_file() -> FilePath:
    """This machine's plan: one file per native build (its key names the MLX
    version and the kernel's sources), in the cache folder (every test home
    has its own: a test never writes the user's plan)."""
    return cache_dir() / "cpu_plans" / f"{native.build_key() or 'no-native-kernel'}.json"


def _stored() -> dict[str, dict]:
    """machine -> shape -> figures, as the plan file holds them."""
    try:
        data = json.loads(plan_file().read_text())
        return data["machines"] if data.get("format") == FORMAT else {}
    except (OSError, ValueError, KeyError):
        return {}


def _known(here: str) -> dict[str, ShapeTimes]:
    key = (str(plan_file()), here)
    if key not in _MEASURED:
        _MEASURED[key] = {k: ShapeTimes(**v) for k, v in _stored().get(here, {}).items()}
    return _MEASURED[key]


def _shapes(loaded: LoadedModel) -> dict[str, Any]:
    return dict((cm.shape_key(layer), layer) for _, layer in cm.quantized_layers(loaded.model))


def known_times(loaded: LoadedModel) -> dict[str, ShapeTimes] | None:
    """Each of the model's shapes' figures as measured on this machine before
    (by any model: this process or the plan file); None while one is missing."""
    known = _known(machine())
    shapes = _shapes(loaded)
    return {k: known[k] for k in shapes} if set(shapes) <= set(known) else None


def shape_times(loaded: LoadedModel) -> tuple[dict[str, ShapeTimes], bool]:
    """Each shape's figures: from the plan when taken on this machine, the
    missing ones measured now and stored. Also whether this call measured."""
    here = machine()
    known, shapes = _known(here), _shapes(loaded)
    missing = {k: layer for k, layer in shapes.items() if k not in known}
    known.update({k: measure_shape(layer) for k, layer in missing.items()})
    if missing:
        machines = {**_stored(), here: {k: asdict(t) for k, t in known.items()}}
        try:
            write_private_text(plan_file(), json.dumps({"format": FORMAT, "machines": machines}))
        except OSError:
            pass  # measured again by the next process
    return {k: known[k] for k in shapes}, bool(missing)


def budget(loaded: LoadedModel, held: int) -> int:
    """Bytes kept copies may take: within the memory fit, KV at the context counted."""
    available = memory.available_memory()
    if available is None:
        return 0
    kv = max(0, loaded.info.needed_bytes - loaded.info.weights_bytes)
    return max(0, available.bytes + held - kv - MARGIN_BYTES)


def decide(mode: str, times: dict[str, ShapeTimes], sizes: dict[str, tuple[int, int]],
           room: int) -> tuple[dict[str, cm.Path], int]:
    """Each shape's path and the bytes kept. ``sizes``: (layers, bytes of one copy)."""
    if mode == "quantized":
        return {k: cm.Path() for k in times}, 0
    if mode == cm.NATIVE:  # the kernel wherever it takes the shape; no copies
        return {k: cm.Path(prefill=mode, decode=mode)
                if t.decode_native < NEVER else cm.Path() for k, t in times.items()}, 0
    int8 = mode == cm.INT8  # auto's choice with the int8 kernel among the paths
    def saving(k: str) -> float:  # decode seconds saved per byte kept
        t = times[k]
        return (t.decode_free(int8)[1] - t.decode_kept) / sizes[k][1]
    keep, used = set(), 0
    for k in sorted(times, key=saving, reverse=True):
        t, (count, each) = times[k], sizes[k]
        wanted = mode == "dequantized" or t.decode_kept < 0.9 * t.decode_free(int8)[1]
        if wanted and used + count * each <= room:
            keep.add(k)
            used += count * each
    paths = {}
    for k, t in times.items():
        if k in keep:
            paths[k] = cm.Path(prefill=cm.KEPT, decode=cm.KEPT)
        else:
            paths[k] = cm.Path(prefill=t.prefill_free(mode), decode=t.decode_free(int8)[0]
                               if mode in ("auto", cm.INT8) else cm.QUANTIZED)
    return paths, used


class CpuMatmul:
    """The engine's part that keeps the model's layers on the chosen paths."""

    def __init__(self) -> None:
        self.plan = MatmulPlan(mode="auto", note="not chosen yet (the first turn measures)")
        self._matched: tuple[int, str, str] | None = None

    def pending(self, loaded: LoadedModel, wanted: str | None) -> str | None:
        """What ``match`` will do that takes a while, in a few words; None when
        nothing (matched already, off the CPU, no quantized layer)."""
        mode = wanted or "auto"
        if (self._matched == (id(loaded.model), loaded.info.fingerprint, mode)
                or not on_cpu() or next(cm.quantized_layers(loaded.model), None) is None):
            return None
        if mode != "quantized" and known_times(loaded) is None:
            return "measuring this CPU's matmul paths (once per model)"
        return "setting up the model's layers for this CPU"

    def match(self, loaded: LoadedModel, wanted: str | None) -> MatmulPlan:
        """Put ``loaded``'s layers on the paths ``wanted`` (auto|quantized|dequantized)
        gives; a no-op when nothing changed. Off the CPU nothing is touched."""
        mode = wanted or "auto"
        key = (id(loaded.model), loaded.info.fingerprint, mode)
        if self._matched == key:
            return self.plan
        self._matched = key
        if not on_cpu():
            self.plan = MatmulPlan(mode=mode, note="not used off the CPU")
            return self.plan
        self.plan = apply(loaded, mode)
        return self.plan


def apply(loaded: LoadedModel, mode: str) -> MatmulPlan:
    """Measure (or read) and set every quantized layer's path for ``mode``."""
    groups: dict[str, list[Any]] = {}
    for _, layer in cm.quantized_layers(loaded.model):
        groups.setdefault(cm.shape_key(layer), []).append(layer)
    if not groups:
        return MatmulPlan(mode=mode)
    held = sum(cm.kept_bytes(x) for ls in groups.values() for x in ls
               if x.__dict__.get("_cpu_kept") is not None)
    if mode == "quantized":
        times, measured = {k: None for k in groups}, False
        paths, used = {k: cm.Path() for k in groups}, 0
    else:
        times, measured = shape_times(loaded)
        sizes = {k: (len(ls), cm.kept_bytes(ls[0])) for k, ls in groups.items()}
        paths, used = decide(mode, times, sizes, budget(loaded, held))
    for k, ls in groups.items():
        for layer in ls:
            cm.set_path(layer, paths[k])
    note = "; ".join(n for n in (
        "" if blas.status().optimized else blas.status().note, native.status().note) if n)
    return MatmulPlan(mode=mode, paths=paths, layers={k: len(ls) for k, ls in groups.items()},
                kept_bytes=used, measured=measured, note=note)
