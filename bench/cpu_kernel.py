"""The native SIMD kernel against MLX's quantized_matmul, each in its own
process: decode tok/s on the bundled model (``cpu_decode_speedup``), the ms a
decode step spends in the quantized layers alone, and one decode step of a
random 1B-shaped llama (hidden 2048, 16 layers, 8192 intermediate, 32 heads /
8 KV heads, vocab 32k, 4-bit groups of 64) built with mlx-lm
(``decode_ms_1b``). The load average is printed with each figure: compare
ratios within one run only.

    .venv/bin/python bench/cpu_kernel.py [--decode 64] [--skip-1b] [--model SPEC]

``--model``: also a model by its spec or GGUF path (e.g. the real Gemma 3
270M Q4_K_M): its ratio is ``cpu_decode_speedup_gguf``.

bench/cpu.py runs it too (the ratios join its last line).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import mlxchat  # noqa: E402,F401  (first: it puts the optimized BLAS under MLX)

ONE_B = dict(model_type="llama", hidden_size=2048, num_hidden_layers=16,
             intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
             vocab_size=32000, rms_norm_eps=1e-5, rope_theta=10000.0,
             tie_word_embeddings=False)


def _paths(model, mode: str) -> None:
    from mlxchat.models import cpu_matmul as cm

    path = cm.Path(decode=cm.NATIVE) if mode == "native" else cm.Path()
    for _, layer in cm.quantized_layers(model):
        cm.set_path(layer, path)


def layers_ms(model) -> float:
    """ms of one row through every quantized layer (one eval), best of 5."""
    import mlx.core as mx

    from mlxchat.models import cpu_matmul as cm

    calls = []
    for _, layer in cm.quantized_layers(model):
        x = mx.random.normal((1, layer.weight.shape[-1] * 32 // layer.bits))
        calls.append((layer.as_linear if hasattr(layer, "as_linear") else layer, x))
    mx.eval([x for _, x in calls])
    best = float("inf")
    for _ in range(6):
        t0 = time.perf_counter()
        mx.eval([f(x) for f, x in calls])
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def _decode_ms(model, steps: int, prompt: int = 32) -> float:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    y = mx.argmax(model(mx.arange(prompt)[None], cache=cache)[:, -1], axis=-1)[None]
    mx.eval(y)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        y = mx.argmax(model(y, cache=cache)[:, -1], axis=-1)[None]
        mx.eval(y)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e3  # the median step


def _one_b():
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models import llama

    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs.from_dict(ONE_B))
    nn.quantize(model, group_size=64, bits=4)
    for layer in model.model.layers:  # a layer at a time: the float weights never all live
        mx.eval(layer.parameters())
    mx.eval(model.parameters())
    return model


def worker(what: str, mode: str, steps: int) -> dict:
    from mlxchat import native

    if what == "1b":
        model = _one_b()
    else:
        from mlxchat.models import load_model

        model = load_model("smollm2-135m" if what == "bundled" else what).model
    _paths(model, mode)
    return {"mode": mode, "native": native.status().words(), "layers_ms": layers_ms(model),
            "step_ms": _decode_ms(model, steps), "load": os.getloadavg()[0]}


def _run(what: str, mode: str, steps: int) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, __file__, "--worker", what, "--mode", mode,
                          "--decode", str(steps)], capture_output=True, text=True, env=env,
                         timeout=1800, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{what} {mode}: {out.stderr.strip()[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(steps: int, one_b: bool, other: str | None = None) -> dict[str, float]:
    ratios = {}
    runs = [("bundled", "bundled SmolLM2-135M")] + ([("1b", "random 1B llama")] if one_b else [])
    for what, label in runs + ([(other, Path(other).name)] if other else []):
        old, new = _run(what, "quantized", steps), _run(what, "native", steps)
        for r in (old, new):
            print(f"{label} {r['mode']}: decode step {r['step_ms']:.2f} ms "
                  f"({1e3 / r['step_ms']:.1f} tok/s), quantized layers alone "
                  f"{r['layers_ms']:.2f} ms a step [native kernel {r['native']}; load {r['load']:.2f}]",
                  flush=True)
        if what not in ("bundled", "1b"):
            ratios["cpu_decode_speedup_gguf"] = old["step_ms"] / new["step_ms"]
        elif what == "bundled":
            ratios["cpu_decode_speedup"] = old["step_ms"] / new["step_ms"]
            ratios["layers_ms_quantized"], ratios["layers_ms_native"] = (old["layers_ms"],
                                                                         new["layers_ms"])
        else:
            ratios["decode_ms_1b_quantized"], ratios["decode_ms_1b"] = (old["step_ms"],
                                                                        new["step_ms"])
    return ratios


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--skip-1b", action="store_true")
    ap.add_argument("--model")
    ap.add_argument("--worker")
    ap.add_argument("--mode", default="native")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.mode, a.decode)))
        return 0
    print(f"load average {os.getloadavg()[0]:.2f}")
    ratios = compare(a.decode, not a.skip_1b, a.model)
    print(f"load average after {os.getloadavg()[0]:.2f}")
    print("ratios: " + " ".join(f"{k}={v:.3f}" for k, v in ratios.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
