"""One decode step of a model on this CPU: how many MLX ops it evaluates and
where its time goes.

    .venv/bin/python bench/decode_step.py [--model smollm2-135m] [--mode auto]
        [--context 200] [--steps 24] [--rounds 3] [--paths native,int8]

Ops are counted from the step's graph: the sampled token and the KV cache's
arrays, every unevaluated array back to the weights, as ``mx.export_to_dot``
writes it (one node per primitive; siblings share one). The split of a step:
Python (building the graph), the quantized layers alone (each layer's call on
one row, all in one evaluation: kernel plus their own dispatch), the rest of
the evaluation (other ops: their kernels and ~one dispatch each), and the cost
of dispatching one trivial op, measured on a chain of them. Two variants
alternate in one process, best step of each: MLX's own ``mx.fast`` ops
(``mlx``), and the native extension's fused ones (``fused``, when it is
built: ``make model``). ``--mode`` is the ``cpu_matmul`` setting. The last
line is: decode_ops_per_step=N [decode_ops_per_step_fused=N] step_ms=X
[step_ms_fused=X] cpu_ms=X [cpu_ms_fused=X] (the process's CPU time a step,
every thread: less swayed by other processes) matmul_ms=X dispatch_us=X load=X

``--paths A,B`` alternates matmul paths instead (every quantized layer on
each in turn, the fused ops on), e.g. ``native,int8``: the float32 kernel
against the int8 one; the figures are named by path, with
``step_ratio_A_over_B`` and ``cpu_ratio_A_over_B`` (the first path's time
over each other's: above 1, the other is faster).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))

import mlxchat  # noqa: E402,F401  (first: it puts the optimized BLAS under MLX)
import mlx.core as mx  # noqa: E402

_NODE = re.compile(r'label ="([^"]+)", shape=rectangle')


def graph_ops(*outputs: mx.array) -> Counter:
    """Primitives the evaluation of ``outputs`` runs, by name."""
    out = io.StringIO()
    mx.export_to_dot(out, *outputs)
    return Counter(_NODE.findall(out.getvalue()))


def cache_arrays(cache: list) -> list[mx.array]:
    return [a for c in cache for a in c.state if isinstance(a, mx.array)]


def dispatch_us(n: int = 2000) -> float:
    """Microseconds per op of a chain of ``n`` one-element adds (best of 3)."""
    best = float("inf")
    for _ in range(3):
        x = mx.zeros((1,))
        mx.eval(x)
        for _ in range(n):
            x = x + 1
        t0 = time.perf_counter()
        mx.eval(x)
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def matmul_s(model, steps: int) -> float:
    """Seconds of every quantized layer's call on one row, one evaluation (median)."""
    from mlxchat.models import cpu_matmul as cm

    calls = []
    for _, layer in cm.quantized_layers(model):
        width = layer.weight.shape[-1] * 32 // layer.bits
        x = mx.random.normal((1, 1, width))
        calls.append((layer.as_linear if hasattr(layer, "as_linear") else layer, x))
    mx.eval([x for _, x in calls])
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        mx.eval([call(x) for call, x in calls])
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:] or times)


def step_split(model, cache: list, steps: int) -> dict[str, float]:
    """Median seconds of a whole step, of building its graph, of evaluating it."""
    y = mx.array([[1]])
    whole, build, run = [], [], []
    cpu0 = time.process_time()
    for _ in range(steps):
        t0 = time.perf_counter()
        tok = mx.argmax(model(y, cache=cache)[:, -1], axis=-1)[None]
        t1 = time.perf_counter()
        mx.eval(tok, cache_arrays(cache))
        t2 = time.perf_counter()
        whole.append(t2 - t0)
        build.append(t1 - t0)
        run.append(t2 - t1)
        y = tok
    cpu = (time.process_time() - cpu0) / steps
    med = lambda xs: statistics.median(xs[1:] or xs)  # noqa: E731
    return {"step": med(whole), "python": med(build), "eval": med(run), "cpu": cpu}


def prepared(spec: str, mode: str, context: int):
    """The model on ``mode``'s paths and a cache holding ``context`` tokens."""
    from mlx_lm.models.cache import make_prompt_cache

    from mlxchat.engine.turn import cpu_choice
    from mlxchat.models import load_model

    loaded = load_model(spec)
    plan = cpu_choice.apply(loaded, mode)
    model = loaded.model
    cache = make_prompt_cache(model)
    ids = (loaded.tokenizer.encode("The keeper lit the lamp at dusk. " * context))[:context]
    for i in range(0, len(ids), 256):
        model(mx.array(ids[i:i + 256])[None], cache=cache)
        mx.eval(cache_arrays(cache))
    return model, cache, plan.words()


def step_ops(model, cache: list) -> Counter:
    """The ops of one step (evaluated after, so the cache moves on by one)."""
    tok = mx.argmax(model(mx.array([[1]]), cache=cache)[:, -1], axis=-1)
    ops = graph_ops(tok, *cache_arrays(cache))
    mx.eval(tok, cache_arrays(cache))
    return ops


def switch(model, name: str, paths: list[str]) -> None:
    """Put the step on variant ``name``: MLX's own fast ops or the fused ones,
    or (``paths``) every quantized layer on that matmul path, fused ops on."""
    from mlxchat.models import cpu_matmul as cm
    from mlxchat.native import fused

    if not paths:
        fused.install() if name == "fused" else fused.uninstall()
        return
    fused.install()
    for _, layer in cm.quantized_layers(model):
        cm.set_path(layer, cm.Path(prefill=name, decode=name))


def measure(spec: str, mode: str, context: int, steps: int, rounds: int,
            paths: list[str] | None = None) -> dict:
    """Each variant (MLX's own fast ops, then the fused ones when the extension
    is built; or each of ``paths``) alternating ``rounds`` times: its ops and
    step split."""
    from mlxchat.native import fused

    model, cache, plan = prepared(spec, mode, context)
    variants = paths or ["mlx"] + (["fused"] if fused.install() else [])
    found: dict[str, dict] = {}
    for _ in range(rounds):
        for name in variants:
            switch(model, name, paths or [])
            ops = step_ops(model, cache)
            split = step_split(model, cache, steps)
            seen = found.setdefault(name, {"ops": ops, "step": [], "python": [], "eval": [],
                                           "cpu": []})
            for key in ("step", "python", "eval", "cpu"):
                seen[key].append(split[key])
    for seen in found.values():
        for key in ("step", "python", "eval", "cpu"):
            seen[key] = min(seen[key])
    return {"plan": plan, "variants": found, "matmul": matmul_s(model, steps),
            "dispatch_us": dispatch_us()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--mode", default="auto",
                    choices=("auto", "quantized", "dequantized", "native", "int8"))
    ap.add_argument("--paths", default="", help="matmul paths to alternate, e.g. native,int8")
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    load = os.getloadavg()[0]
    paths = [p for p in a.paths.split(",") if p]
    r = measure(a.model, a.mode, a.context, a.steps, a.rounds, paths)
    print(f"load average {load:.2f}; {a.model}, {a.context}-token context; {r['plan']}")
    print(f"quantized layers alone {r['matmul'] * 1e3:.1f} ms a step; one trivial op "
          f"{r['dispatch_us']:.1f} us")
    for name, v in r["variants"].items():
        ops, n = v["ops"], sum(v["ops"].values())
        other = max(0.0, v["eval"] - r["matmul"])
        print(f"{name}: {n} ops ({', '.join(f'{k} {c}' for k, c in ops.most_common(8))}, ...)")
        print(f"{name}: step {v['step'] * 1e3:.1f} ms ({1 / v['step']:.1f} tok/s): python "
              f"(graph) {v['python'] * 1e3:.1f} ms, evaluation {v['eval'] * 1e3:.1f} ms = "
              f"quantized layers {r['matmul'] * 1e3:.1f} + other ops {other * 1e3:.1f} ms "
              f"(dispatch alone ~{r['dispatch_us'] * n / 1e3:.1f} ms); CPU time "
              f"{v['cpu'] * 1e3:.1f} ms a step (every thread)")
    figures = {f"decode_ops_per_step{'' if k == 'mlx' else '_' + k}": sum(v["ops"].values())
               for k, v in r["variants"].items()}
    for key in ("step", "cpu"):
        figures.update({f"{key}_ms{'' if k == 'mlx' else '_' + k}": round(v[key] * 1e3, 2)
                        for k, v in r["variants"].items()})
        for other in paths[1:]:
            first = r["variants"][paths[0]][key] / r["variants"][other][key]
            figures[f"{key}_ratio_{paths[0]}_over_{other}"] = round(first, 3)
    print(" ".join(f"{k}={v}" for k, v in figures.items())
          + f" matmul_ms={r['matmul'] * 1e3:.2f} dispatch_us={r['dispatch_us']:.2f} "
          f"load={os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
