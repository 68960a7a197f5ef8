"""The Linux CPU path: today's (the wheel's reference BLAS, quantized_matmul
everywhere) against the new one (an optimized BLAS under MLX, each quantized
layer shape on its measured path), back to back, each in its own process, and
against llama.cpp on the same GGUF file when ``llama-cpp-python`` is there.

    .venv/bin/python bench/cpu.py [--gguf FILE.gguf] [--llamacpp-python PYTHON]

``--gguf``: also measure that file (e.g. the real Gemma 3 270M Q4_K_M), imported.
``--llamacpp-python`` (default ``$LLAMACPP_PYTHON``, else this interpreter): a
Python with ``llama_cpp`` importable; absent, the llama.cpp figures are skipped
and the bench says so. A 1,000-token prefill (chunks of 256, as the engine
feeds them) then 128 greedy tokens; the cold time to the first token after a
1k- and a 2k-token history. The last line is:
ratios: cpu_prefill_speedup=X cpu_decode_speedup_vs_today=X [vs_llamacpp_prefill=X
vs_llamacpp_decode=X] cpu_cold_ttft_1k_s=X cpu_cold_ttft_2k_s=X (and _gguf ones),
then bench/cpu_kernel.py's: cpu_decode_speedup (the native kernel vs
quantized_matmul alone, bundled model), the quantized layers' ms a decode step
on each, decode_ms_1b (a random 1B-shaped llama, native; and _quantized).
``--skip-1b`` leaves the 1B model out.
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

CHUNK = 256
TEXT = ("The lighthouse keeper climbed the stairs at dusk, as he had done every evening for "
        "thirty years, and lit the lamp that warned the fishing boats away from the rocks. ")


def _history(tokenize, n: int) -> list[int]:
    ids: list[int] = []
    while len(ids) < n:
        ids += tokenize(TEXT + f"Day {len(ids)}. ")
    return ids[:n]


def worker(model_spec: str, mode: str, prefill: int, decode: int) -> dict:
    """In this process: load, put the layers on ``mode``'s paths, time."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from mlxchat import blas
    from mlxchat.engine.turn import cpu_choice
    from mlxchat.models import load_model

    loaded = load_model(model_spec)
    started = time.perf_counter()
    plan = cpu_choice.apply(loaded, mode)
    choose_s = time.perf_counter() - started
    model, encode = loaded.model, loaded.tokenizer.encode

    def cold_ttft(n: int) -> tuple[float, list[mx.array]]:
        ids, cache = _history(encode, n), make_prompt_cache(model)
        t0 = time.perf_counter()
        for i in range(0, len(ids) - 1, CHUNK):
            model(mx.array(ids[i:min(i + CHUNK, len(ids) - 1)])[None], cache=cache)
            mx.eval([c.state for c in cache])
        mx.eval(mx.argmax(model(mx.array(ids[-1:])[None], cache=cache)[:, -1], axis=-1))
        return time.perf_counter() - t0, cache

    ttft_1k, cache = cold_ttft(prefill)
    y, t0 = mx.array([[0]]), time.perf_counter()
    for _ in range(decode):
        y = mx.argmax(model(y, cache=cache)[:, -1], axis=-1)[None]
        mx.eval(y)
    decode_s = time.perf_counter() - t0
    ttft_2k = cold_ttft(2 * prefill)[0] if mode != "quantized" else None
    return {"blas": blas.status().words(), "plan": plan.words(), "choose_s": choose_s,
            "prefill_tps": prefill / ttft_1k, "decode_tps": decode / decode_s,
            "ttft_1k_s": ttft_1k, "ttft_2k_s": ttft_2k}


LLAMACPP = r"""
import json, sys, time
import numpy as np
import llama_cpp
from llama_cpp import Llama
path, n, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = Llama(model_path=path, n_ctx=4096, n_batch=256, n_threads=threads, verbose=False)
text = sys.stdin.read()
ids = []
while len(ids) < n:
    ids += llm.tokenize((text + f"Day {len(ids)}. ").encode(), add_bos=False)
ids = ids[:n]
def last():
    row = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return int(np.argmax(np.ctypeslib.as_array(row, shape=(llm.n_vocab(),))))
t0 = time.perf_counter(); llm.eval(ids); tok = last(); pre = time.perf_counter() - t0
t0 = time.perf_counter()
for _ in range(steps):
    llm.eval([tok]); tok = last()
dec = time.perf_counter() - t0
print(json.dumps({"prefill_tps": n / pre, "decode_tps": steps / dec}))
"""


def _run(args: list[str], env: dict | None = None, stdin: str | None = None) -> dict:
    out = subprocess.run(args, capture_output=True, text=True, env=env, input=stdin,
                         timeout=3600, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])}...: {out.stderr.strip()[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ours(spec: str, new: bool, prefill: int, decode: int) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if not new:
        env["MLXCHAT_BLAS"] = "none"
    return _run([sys.executable, __file__, "--worker", spec, "--mode",
                 "auto" if new else "quantized", "--prefill", str(prefill),
                 "--decode", str(decode)], env)


def _llamacpp(python: str | None, gguf: Path, prefill: int, decode: int) -> dict | None:
    if python is None:
        return None
    threads = len(os.sched_getaffinity(0))
    return _run([python, "-c", LLAMACPP, str(gguf), str(prefill), str(decode), str(threads)],
                stdin=TEXT)


def _llamacpp_python(asked: str | None) -> str | None:
    for python in ([asked] if asked else []) + [sys.executable]:
        probe = subprocess.run([python, "-c", "import llama_cpp"], capture_output=True)
        if probe.returncode == 0:
            return python
    return None


def compare(label: str, spec: str, gguf: Path, python: str | None, a: argparse.Namespace,
            suffix: str) -> dict[str, float]:
    today = _ours(spec, False, a.prefill, a.decode)
    new = _ours(spec, True, a.prefill, a.decode)
    print(f"{label}: {json.dumps({'today': today, 'new': new})}", flush=True)
    theirs = _llamacpp(python, gguf, a.prefill, a.decode)
    for name, r in (("today", today), ("new", new)) + ((("llama.cpp", theirs),) if theirs else ()):
        extra = f" [{r['blas']}; {r['plan']}; chosen in {r['choose_s']:.1f} s]" if "plan" in r else ""
        print(f"{label} {name}: prefill {r['prefill_tps']:.1f} tok/s, decode "
              f"{r['decode_tps']:.1f} tok/s" + (f", cold TTFT 1k {r['ttft_1k_s']:.2f} s" if "plan" in r else "")
              + (f", 2k {r['ttft_2k_s']:.2f} s" if r.get("ttft_2k_s") else "")
              + extra)
    ratios = {f"cpu_prefill_speedup{suffix}": new["prefill_tps"] / today["prefill_tps"],
              f"cpu_decode_speedup_vs_today{suffix}": new["decode_tps"] / today["decode_tps"]}
    if theirs:
        ratios[f"vs_llamacpp_prefill{suffix}"] = new["prefill_tps"] / theirs["prefill_tps"]
        ratios[f"vs_llamacpp_decode{suffix}"] = new["decode_tps"] / theirs["decode_tps"]
    ratios[f"cpu_cold_ttft_1k_s{suffix}"] = new["ttft_1k_s"]
    ratios[f"cpu_cold_ttft_2k_s{suffix}"] = new["ttft_2k_s"]
    return ratios


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path)
    ap.add_argument("--llamacpp-python", default=os.environ.get("LLAMACPP_PYTHON"))
    ap.add_argument("--prefill", type=int, default=1000)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--skip-1b", action="store_true")
    ap.add_argument("--worker")
    ap.add_argument("--mode", default="auto")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.mode, a.prefill, a.decode)))
        return 0
    from mlxchat.models.gguf.importer import bundled_gguf

    python = _llamacpp_python(a.llamacpp_python)
    print(f"load average {os.getloadavg()[0]:.2f}; llama.cpp: "
          + (python or "llama-cpp-python not importable here (--llamacpp-python): skipped"))
    ratios = compare("bundled SmolLM2-135M", "smollm2-135m", bundled_gguf(), python, a, "")
    if a.gguf:
        ratios.update(compare(a.gguf.name, str(a.gguf), a.gguf, python, a, "_gguf"))
    print(f"load average {os.getloadavg()[0]:.2f} (the native kernel)")
    from bench import cpu_kernel

    ratios.update(cpu_kernel.compare(min(a.decode, 64), not a.skip_1b,
                                     str(a.gguf) if a.gguf else None))
    print(f"load average after {os.getloadavg()[0]:.2f}")
    print("ratios: " + " ".join(f"{k}={v:.3f}" for k, v in ratios.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
