"""Greedy tokens with the int8 kernel (``cpu_matmul=int8``: activations rounded
to int8 per block of 32) against the float32 kernel (``native``), on every
tiny family (random weights, 4-bit g32) and on the bundled model.

    .venv/bin/python bench/int8_tokens.py [--tokens 64] [--no-bundled]

Per model: how many of the greedy tokens are the same (and where the first
difference is, with the float32 logits' margin between its top two there),
then teacher-forced on the float32 tokens: top-1 agreement and the largest
logit error relative to the largest logit. Random tiny models have nearly
flat logits, so a near tie flips easily; the bundled model is the real case.
The last line: ``int8_tokens_same=N/M int8_teacher_top1=N/M`` over all models.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))

import mlxchat  # noqa: E402,F401  (first: it puts the optimized BLAS under MLX)
import mlx.core as mx  # noqa: E402
from mlx_lm.models.cache import make_prompt_cache  # noqa: E402

from mlxchat.models import cpu_matmul as cm  # noqa: E402

PROMPT = [5, 17, 33, 2, 41, 9, 12, 60, 7, 22, 31, 44, 3, 18]  # 14 rows: the prefill path


def on_path(model, path: str) -> None:
    for _, layer in cm.quantized_layers(model):
        cm.set_path(layer, cm.Path(prefill=path, decode=path))


def greedy(model, prompt: list[int], n: int) -> tuple[list[int], list[mx.array]]:
    cache = make_prompt_cache(model)
    logits = model(mx.array(prompt)[None], cache=cache)[0, -1]
    tokens, seen = [], []
    for _ in range(n):
        seen.append(logits)
        tokens.append(int(mx.argmax(logits).item()))
        logits = model(mx.array([[tokens[-1]]]), cache=cache)[0, -1]
    return tokens, seen


def forced(model, prompt: list[int], tokens: list[int]) -> list[mx.array]:
    """The logits before each of ``tokens``, fed one by one after the prompt."""
    cache = make_prompt_cache(model)
    logits = [model(mx.array(prompt)[None], cache=cache)[0, -1]]
    for t in tokens[:-1]:
        logits.append(model(mx.array([[t]]), cache=cache)[0, -1])
    return logits


def compare(name: str, model, prompt: list[int], n: int) -> tuple[int, int]:
    on_path(model, cm.NATIVE)
    want, want_logits = greedy(model, prompt, n)
    on_path(model, cm.INT8)
    got, _ = greedy(model, prompt, n)
    teacher = forced(model, prompt, want)
    cm.clear(model)
    same = sum(a == b for a, b in zip(got, want))
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    top1 = sum(int(mx.argmax(t).item()) == w for t, w in zip(teacher, want))
    error = max(float(mx.abs(t - f).max().item()) / float(mx.abs(f).max().item())
                for t, f in zip(teacher, want_logits))
    where = "none differs"
    if first is not None:
        top2 = mx.sort(want_logits[first])[-2:]
        where = (f"first difference at step {first} (float32 margin there "
                 f"{float((top2[1] - top2[0]).item()):.4f})")
    print(f"{name}: greedy tokens the same {same}/{n}, {where}; teacher-forced top-1 "
          f"{top1}/{n}, logits' largest error {error:.2%} of the largest logit", flush=True)
    return same, top1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--no-bundled", action="store_true")
    a = ap.parse_args()
    from mlxchat import native

    if native.module() is None:
        raise SystemExit(f"the native kernel is not loaded: {native.status().note}")
    from tests.families.builders import FAMILIES, quantized_family_model

    print(f"load average {os.getloadavg()[0]:.2f}; int8 kernel: {native.module().q8_isa()}")
    totals = [0, 0, 0]
    runs = [(f.name, lambda f=f: quantized_family_model(f), PROMPT) for f in FAMILIES]
    if not a.no_bundled:
        from mlxchat.models import load_model

        bundled = load_model("smollm2-135m")
        ids = bundled.tokenizer.encode("The lighthouse keeper climbed the stairs at dusk, as "
                                       "he had done every evening, and")
        runs.append(("bundled SmolLM2-135M", lambda: bundled.model, ids))
    for name, build, prompt in runs:
        same, top1 = compare(name, build(), prompt, a.tokens)
        totals = [totals[0] + same, totals[1] + top1, totals[2] + a.tokens]
    print(f"int8_tokens_same={totals[0]}/{totals[2]} int8_teacher_top1={totals[1]}/{totals[2]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
