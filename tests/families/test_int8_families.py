"""The int8 path (``cpu_matmul=int8``: activations rounded to int8 per block of
32) on every tiny family, 4-bit g32: each quantized layer, given the
activations the model itself produces over a prefill chunk and decode steps,
stays within the rounding's bound of the float32 kernel, output by output, and
within 2% (relative RMS) over its outputs; and the model's next token, fed the
float32 model's own greedy tokens, is the same for most steps.

Not the same everywhere: random tiny models have near-flat logits, where the
rounding flips near ties (bench/int8_tokens.py counts and places them)."""

from __future__ import annotations

import sys

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from mlxchat import native
from mlxchat.models import cpu_matmul as cm

from .builders import FAMILIES, quantized_family_model

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="built on Linux only (Metal serves macOS)")

PROMPT = [5, 17, 33, 2, 41, 9, 12, 60, 7, 22, 31, 44, 3, 18]  # 14 rows: the prefill path
STEPS = 32


def _on(model, path: str) -> None:
    for _, layer in cm.quantized_layers(model):
        cm.set_path(layer, cm.Path(prefill=path, decode=path))


def _logits(model, tokens: list[int]) -> list[mx.array]:
    """The logits after the prompt and after each of ``tokens`` fed in turn."""
    cache = make_prompt_cache(model)
    out = [model(mx.array(PROMPT)[None], cache=cache)[0, -1]]
    for t in tokens:
        out.append(model(mx.array([[t]]), cache=cache)[0, -1])
    mx.eval(out)
    return out


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_int8_layers_and_tokens_against_float32(family, monkeypatch):
    assert native.status().available, native.status().note  # `make test` builds it
    kernel = native.module()
    model = quantized_family_model(family)
    _on(model, cm.NATIVE)
    errors: list[float] = []
    plain = cm.CpuQuantizedLinear.__call__

    def checked(layer, x):
        y = plain(layer, x)
        if x.dtype == mx.float32 and cm.native_takes(layer):
            args = (x, layer.weight, layer.scales, layer.biases, layer.group_size, layer.bits)
            got, want = kernel.qmm(*args, int8=True), kernel.qmm(*args)
            _, d = kernel.quantize_q8(x)  # within the rounding's bound, output by output
            half = mx.repeat(d, 32, axis=-1) / 2
            dense = mx.dequantize(layer.weight, layer.scales, layer.biases,
                                  group_size=layer.group_size, bits=layer.bits)
            bound = half @ mx.abs(dense).T + 1e-5 * float(mx.abs(want).max().item())
            assert bool(mx.all(mx.abs(got - want) <= bound).item())
            if want.shape[-1] >= 16:  # (one output's relative error is a single dot's)
                errors.append(float(mx.sqrt(mx.mean((got - want) ** 2)
                                            / mx.maximum(mx.mean(want ** 2), 1e-30)).item()))
        return y

    with monkeypatch.context() as patched:
        patched.setattr(cm.CpuQuantizedLinear, "__call__", checked)
        greedy = []
        cache = make_prompt_cache(model)
        logits = model(mx.array(PROMPT)[None], cache=cache)[0, -1]
        for _ in range(STEPS):
            greedy.append(int(mx.argmax(logits).item()))
            logits = model(mx.array([[greedy[-1]]]), cache=cache)[0, -1]
    assert len(errors) > len(list(cm.quantized_layers(model)))  # prefill and decode
    assert max(errors) < 0.02, max(errors)
    want = _logits(model, greedy[:-1])
    _on(model, cm.INT8)
    assert all(layer.__dict__["_cpu_native"] for _, layer in cm.quantized_layers(model)
               if cm.native_takes(layer))
    got = _logits(model, greedy[:-1])
    same = sum(int(mx.argmax(g).item()) == int(mx.argmax(w).item()) for g, w in zip(got, want))
    assert same >= 0.85 * STEPS, (family.name, same)
    cm.clear(model)
