"""How prefill time grows with the history: each 256-token chunk's seconds at
its position, and the cold time to the first token after histories of
several lengths, with MLX's own attention and with the native fused one,
alternating in one process.

    .venv/bin/python bench/prefill_growth.py [--model smollm2-135m] [--sizes 500,1000,2000]

A chunk's cost is its layers (the same at every position) plus its attention
over every key before it (growing with the position): a chunk at 1,792 over
one at 0 says how much the attention weighs. The last line is:
chunk_growth=X chunk_growth_fused=X ttft_ratio=X ttft_ratio_fused=X (the
largest size's cold TTFT over the middle one's) ttft_N_s=X cpu_ratio=X cpu_N_s=X (the
same in the process's CPU seconds) and their _fused (and with --floor, _floor:
the layers alone) twins, load=X
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))

import mlxchat  # noqa: E402,F401  (first: it puts the optimized BLAS under MLX)
import mlx.core as mx  # noqa: E402

CHUNK = 256
TEXT = ("The lighthouse keeper climbed the stairs at dusk, as he had done every evening for "
        "thirty years, and lit the lamp that warned the fishing boats away from the rocks. ")


def _state(cache: list) -> list[mx.array]:
    return [a for c in cache for a in c.state if isinstance(a, mx.array)]


def cold_ttft(model, ids: list[int]) -> tuple[float, float, list[float]]:
    """Seconds to the first token after ``ids`` (chunks of 256, as bench/cpu.py
    feeds them), the process's CPU seconds for it (every thread: less swayed
    by other processes than the wall clock), and each chunk's seconds."""
    from mlx_lm.models.cache import make_prompt_cache

    cache, chunks = make_prompt_cache(model), []
    t0, cpu0 = time.perf_counter(), time.process_time()
    for i in range(0, len(ids) - 1, CHUNK):
        c0 = time.perf_counter()
        model(mx.array(ids[i:min(i + CHUNK, len(ids) - 1)])[None], cache=cache)
        mx.eval(_state(cache))
        chunks.append(time.perf_counter() - c0)
    mx.eval(mx.argmax(model(mx.array(ids[-1:])[None], cache=cache)[:, -1], axis=-1))
    return time.perf_counter() - t0, time.process_time() - cpu0, chunks


def _no_attention(q, k, v, *, scale, mask=None, **_):
    return q * scale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--sizes", default="500,1000,2000")
    ap.add_argument("--mode", default="auto", help="cpu_matmul: auto|quantized|native|...")
    ap.add_argument("--floor", action="store_true",
                    help="also the layers alone (attention replaced by its input: no model's "
                         "output, only the cost without attention)")
    a = ap.parse_args()
    from mlxchat.engine.turn import cpu_choice
    from mlxchat.models import load_model
    from mlxchat.native import fused

    sizes = [int(x) for x in a.sizes.split(",")]
    loaded = load_model(a.model)
    plan = cpu_choice.apply(loaded, a.mode)
    ids: list[int] = []
    while len(ids) < max(sizes):
        ids += loaded.tokenizer.encode(TEXT + f"Day {len(ids)}. ")
    variants = ["mlx"] + (["fused"] if fused.install() else []) + (["floor"] if a.floor else [])
    print(f"load average {os.getloadavg()[0]:.2f}; {a.model}; {plan.words()}")
    ttft: dict[str, dict[int, float]] = {v: {} for v in variants}
    cpu_s: dict[str, dict[int, float]] = {v: {} for v in variants}
    growth: dict[str, float] = {}
    for n in sizes:
        for name in variants:
            fused.install() if name == "fused" else fused.uninstall()
            if name == "floor":
                mx.fast.scaled_dot_product_attention = _no_attention
            seconds, cpu, chunks = cold_ttft(loaded.model, ids[:n])
            ttft[name][n], cpu_s[name][n] = seconds, cpu
            print(f"{name} {n} tokens: cold TTFT {seconds:.2f} s (CPU {cpu:.2f} s); chunks "
                  + " ".join(f"{c:.2f}" for c in chunks) + f" (load {os.getloadavg()[0]:.1f})",
                  flush=True)
            if len(chunks) > 2:
                growth[name] = chunks[-2] / chunks[0]  # the last full chunk over the first
    fused.uninstall()
    big, mid = sizes[-1], sizes[-2] if len(sizes) > 1 else sizes[-1]
    figures = {}
    for name in variants:
        suffix = "" if name == "mlx" else f"_{name}"
        figures[f"chunk_growth{suffix}"] = growth.get(name, 0.0)
        figures[f"ttft_ratio{suffix}"] = ttft[name][big] / ttft[name][mid]
        figures[f"ttft_{big}_s{suffix}"] = ttft[name][big]
        figures[f"cpu_ratio{suffix}"] = cpu_s[name][big] / cpu_s[name][mid]
        figures[f"cpu_{big}_s{suffix}"] = cpu_s[name][big]
    print(" ".join(f"{k}={v:.3f}" for k, v in figures.items())
          + f" load={os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
