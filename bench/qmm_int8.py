"""The native kernel's int8 path against the paths it competes with, per layer
shape of the bundled model and of Gemma 3 270M (random weights of those
shapes and bit widths, group 32, float16 scales as the GGUF imports hold):

- a prefill chunk (``--rows``, 256): int8 vs the float32 BLAS on the weight
  dequantized for the chunk (``cpu_matmul``'s ``dequantized`` path) and vs the
  float32 kernel (``native``);
- a decode step (one row): int8 vs the float32 kernel, with the weights in
  cache (one matrix again and again) and from memory (copies cycled through,
  64 MB in all).

    .venv/bin/python bench/qmm_int8.py [--rows 256] [--rounds 3]

The paths alternate within each round, best of ``--rounds``; the load average
is printed before each shape. The last line: int8_prefill_over_blas=X
int8_prefill_over_native=X int8_decode_over_native=X
int8_decode_over_native_memory=X (geometric means over the shapes of the
other path's time over int8's: above 1, int8 is faster).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))

import mlxchat  # noqa: E402,F401  (first: it puts the optimized BLAS under MLX)
import mlx.core as mx  # noqa: E402

SHAPES = [  # (out, in, bits): the bundled SmolLM2-135M, then Gemma 3 270M Q4_K_M
    (576, 576, 4), (192, 576, 4), (1536, 576, 4), (576, 1536, 4), (49152, 576, 8),
    (1024, 640, 5), (256, 640, 5), (2048, 640, 5), (640, 1024, 4), (640, 2048, 8)]


def _best(fn, reps: int = 5) -> float:
    mx.eval(fn())
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        mx.eval(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def _weights(out: int, width: int, bits: int, copies: int = 1) -> list[tuple]:
    found = []
    for c in range(copies):
        mx.random.seed(c)
        wq, s, b = mx.quantize(mx.random.normal((out, width)) * 0.1, group_size=32, bits=bits)
        found.append((wq, s.astype(mx.float16), b.astype(mx.float16)))
    mx.eval(found)
    return found


def shape(ext, out: int, width: int, bits: int, rows: int, rounds: int) -> dict[str, float]:
    (w, s, b), = _weights(out, width, bits)
    chunk, one = mx.random.normal((rows, width)), mx.random.normal((1, width))
    many = _weights(out, width, bits, max(1, int(64e6 // (out * width * bits / 8))))
    paths = {
        "blas": lambda: chunk @ mx.dequantize(w, s, b, group_size=32, bits=bits).T,
        "native": lambda: ext.qmm(chunk, w, s, b, 32, bits),
        "int8": lambda: ext.qmm(chunk, w, s, b, 32, bits, int8=True),
        "native1": lambda: ext.qmm(one, w, s, b, 32, bits),
        "int81": lambda: ext.qmm(one, w, s, b, 32, bits, int8=True),
    }

    def cycled(int8: bool) -> float:
        t0 = time.perf_counter()
        for wq, sq, bq in many:
            mx.eval(ext.qmm(one, wq, sq, bq, 32, bits, int8=int8))
        return (time.perf_counter() - t0) / len(many)

    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, fn in paths.items():
            best[name] = min(best.get(name, float("inf")), _best(fn))
        for name, int8 in (("nativem", False), ("int8m", True)):
            best[name] = min(best.get(name, float("inf")), cycled(int8))
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from mlxchat import native

    ext = native.module()
    if ext is None:
        raise SystemExit(f"the native kernel is not loaded: {native.status().note}")
    print(f"int8 kernel: {ext.q8_isa()}, {ext.threads()} threads")
    ratios: dict[str, list[float]] = {}
    for out, width, bits in SHAPES:
        load = os.getloadavg()[0]
        t = shape(ext, out, width, bits, a.rows, a.rounds)
        pairs = {"int8_prefill_over_blas": t["blas"] / t["int8"],
                 "int8_prefill_over_native": t["native"] / t["int8"],
                 "int8_decode_over_native": t["native1"] / t["int81"],
                 "int8_decode_over_native_memory": t["nativem"] / t["int8m"]}
        for k, v in pairs.items():
            ratios.setdefault(k, []).append(v)
        print(f"{out}x{width} {bits}-bit, load {load:.1f}: {a.rows} rows: BLAS "
              f"{t['blas'] * 1e3:.2f} ms, native {t['native'] * 1e3:.2f} ms, int8 "
              f"{t['int8'] * 1e3:.2f} ms; one row: native {t['native1'] * 1e6:.0f} us, int8 "
              f"{t['int81'] * 1e6:.0f} us (from memory {t['nativem'] * 1e6:.0f} / "
              f"{t['int8m'] * 1e6:.0f} us)", flush=True)
    print(" ".join(f"{k}={math.exp(sum(map(math.log, v)) / len(v)):.2f}"
                   for k, v in ratios.items()) + f" load={os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
