"""The native kernel's one-row matvec (decode) against this machine's memory
floor: ns a weight per shape of the bundled model (576->1536, 1536->576,
576->576, 576->192 at 4 bits, the 49,152x576 head at 8 bits), float32 and
float16 scales, with the weights in cache (``l3``: copies summing to ~20 MB)
and streamed from memory (``dram``: copies summing to ~200 MB), beside a plain
streaming read (numpy's sum over 256 MB) and the floor it sets for the
shape's bytes. Run with MLXCHAT_KERNEL_THREADS=1 for one core.

    MLXCHAT_KERNEL_THREADS=1 .venv/bin/python bench/qmm_floor.py [--so PATH]

``--so``: another build of the extension (e.g. an older one, to compare in
one run). The last line: read_gb_s=X and, per shape, <shape>_ns_w=X (dram,
float16 scales).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))

import mlxchat  # noqa: E402,F401
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

SHAPES = [(1536, 576, 4), (576, 1536, 4), (576, 576, 4), (192, 576, 4), (49152, 576, 8)]


def read_gb_s() -> float:
    a = np.ones(64 << 20, np.float32)
    best = min(_timed(a.sum) for _ in range(5))
    return a.nbytes / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def ns_per_weight(ext, n: int, k: int, bits: int, dtype, total_mb: float) -> tuple[float, int]:
    """(ns a weight, bytes a copy): best of 5 over copies summing to ``total_mb``."""
    q, s, b = mx.quantize(mx.random.normal((n, k)), group_size=32, bits=bits)
    one = q.nbytes + s.nbytes // (4 // dtype.size) * 2
    copies = max(1, int(total_mb * 1e6 // one))
    ws = [(q + 0, (s + 0).astype(dtype), (b + 0).astype(dtype)) for _ in range(copies)]
    x = mx.random.normal((1, k))
    mx.eval(ws, x)
    best = min(_timed(lambda: mx.eval([ext.qmm(x, *w, 32, bits) for w in ws])) for _ in range(5))
    return best / copies / (n * k) * 1e9, one


def load(so: str | None):
    if not so:
        from mlxchat import native

        return native.module()
    spec = importlib.util.spec_from_file_location("_mlxchat_native", so)
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    return ext


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--so")
    ext = load(ap.parse_args().so)
    if ext is None:
        raise SystemExit("the native kernel is not built: make model")
    bw = read_gb_s()
    print(f"load {os.getloadavg()[0]:.2f}; {ext.qmm_isa()}, {ext.threads()} thread(s); "
          f"streaming read {bw:.1f} GB/s")
    figures = {"read_gb_s": round(bw, 1)}
    for n, k, bits in SHAPES:
        for dtype in (mx.float32, mx.float16):
            cells = []
            for where, mb in (("l3", 20), ("dram", 200)):
                ns, one = ns_per_weight(ext, n, k, bits, dtype, mb)
                cells.append(f"{where} {ns:.3f}")
            floor = one / (n * k) / bw
            print(f"{n}x{k} {bits}-bit {str(dtype).split('.')[-1]:8s} ns/weight: "
                  f"{', '.join(cells)}; floor {floor:.3f}")
        figures[f"{n}x{k}_ns_w"] = round(ns, 3)
    print(" ".join(f"{k}={v}" for k, v in figures.items()) + f" load={os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
