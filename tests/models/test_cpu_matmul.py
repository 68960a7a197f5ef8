"""Every CPU compute path of a quantized layer gives what quantized_matmul gives:
logits within float32 rounding on tiny random models of every family the tests
build (dense, MoE, gpt-oss with MXFP4 experts), the same greedy tokens there and
on the bundled model over 64 tokens. The native kernel among the paths."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.models import cpu_matmul as cm

from tests.families.builders import FAMILIES, quantized_family_model

PATHS = {
    "dequantized per chunk": cm.Path(prefill=cm.DEQUANTIZED),
    "kept copy": cm.Path(prefill=cm.KEPT, decode=cm.KEPT),
    "per chunk, then kept for decode": cm.Path(prefill=cm.DEQUANTIZED, decode=cm.KEPT),
    "native kernel": cm.Path(prefill=cm.NATIVE, decode=cm.NATIVE),
    "per chunk, then the native kernel for decode": cm.Path(prefill=cm.DEQUANTIZED,
                                                            decode=cm.NATIVE),
}
PROMPT = [5, 17, 33, 2, 41, 9, 12, 60, 7, 22, 31, 44, 3, 18]  # 14 rows: a prefill chunk


def _run(model, steps: int) -> tuple[list[mx.array], list[int]]:
    """The prompt's last logits and each decode step's, and the greedy tokens."""
    cache = make_prompt_cache(model)
    logits = [model(mx.array(PROMPT)[None], cache=cache)[0, -1]]
    tokens = []
    for _ in range(steps):
        tokens.append(int(mx.argmax(logits[-1]).item()))
        logits.append(model(mx.array([[tokens[-1]]]), cache=cache)[0, -1])
    mx.eval(logits)
    return logits, tokens


def _on_path(model, path: cm.Path) -> int:
    layers = list(cm.quantized_layers(model))
    for _, layer in layers:
        cm.set_path(layer, path)
    return len(layers)


CASES = [(f.name, f, "affine") for f in FAMILIES] + [
    ("gpt_oss-mxfp4", next(f for f in FAMILIES if f.name == "gpt_oss"), "mxfp4")]


@pytest.mark.parametrize("name,family,mode", CASES, ids=[c[0] for c in CASES])
def test_every_path_matches_quantized_matmul(name, family, mode):
    model = quantized_family_model(family, mode=mode)
    want_logits, want_tokens = _run(model, 64)
    for label, path in PATHS.items():
        assert _on_path(model, path) > 0
        logits, tokens = _run(model, 64)
        assert tokens == want_tokens, label
        for got, want in zip(logits, want_logits):
            scale = float(mx.abs(want).max().item())
            assert float(mx.abs(got - want).max().item()) <= 1e-4 * scale, label
        kept = [layer for _, layer in cm.quantized_layers(model)
                if layer.__dict__.get("_cpu_kept") is not None]
        assert bool(kept) == path.keeps, label
        native_layers = [name for name, layer in cm.quantized_layers(model)
                         if layer.__dict__.get("_cpu_native")]
        # The kernel takes every affine 4-bit layer (it is built by `make test`).
        assert bool(native_layers) == (cm.NATIVE in (path.prefill, path.decode)
                                       and mode == "affine"), label
    cm.clear(model)
    assert all(layer.__dict__.get("_cpu_kept") is None for _, layer in cm.quantized_layers(model))
    assert _run(model, 64)[1] == want_tokens


def test_the_kept_copy_is_no_parameter(bundled_model):
    from mlx.utils import tree_flatten

    model = bundled_model.model
    before = {k: v.nbytes for k, v in tree_flatten(model.parameters())}
    try:
        _on_path(model, PATHS["kept copy"])
        after = {k: v.nbytes for k, v in tree_flatten(model.parameters())}
        assert after == before  # never saved, cast or counted as weights
    finally:
        cm.clear(model)


def test_bundled_model_greedy_tokens_are_the_same_on_every_path(bundled_model):
    model = bundled_model.model
    ids = bundled_model.tokenizer.encode(
        "The lighthouse keeper climbed the stairs at dusk, as he had done every evening, and")
    assert len(ids) > cm.DECODE_ROWS  # the prompt takes the prefill path
    def greedy() -> list[int]:
        cache = make_prompt_cache(model)
        y = mx.argmax(model(mx.array(ids)[None], cache=cache)[0, -1])
        out = []
        for _ in range(64):
            out.append(int(y.item()))
            y = mx.argmax(model(mx.array([[out[-1]]]), cache=cache)[0, -1])
        return out
    try:
        cm.clear(model)
        want = greedy()
        _on_path(model, cm.Path(prefill=cm.DEQUANTIZED, decode=cm.KEPT))
        assert greedy() == want
        _on_path(model, cm.Path(prefill=cm.NATIVE, decode=cm.NATIVE))
        assert all(layer.__dict__["_cpu_native"] for _, layer in cm.quantized_layers(model))
        # Q4_1's and Q8_0's scales are float16 in the file: the kernel reads them so.
        assert all(layer.__dict__["_cpu_half"][2] is not None
                   for _, layer in cm.quantized_layers(model))
        assert greedy() == want
    finally:
        cm.clear(model)


def test_the_native_path_reads_float16_copies_only_of_exact_scales():
    mx.random.seed(7)
    layer = nn.QuantizedLinear(96, 40, bias=False, group_size=32, bits=4)
    halves = (layer.scales.astype(mx.float16).astype(mx.float32),
              layer.biases.astype(mx.float16).astype(mx.float32))
    x = mx.random.normal((1, 96))
    for scales, biases, exact in ((*halves, True), (halves[0] + 1e-7, halves[1], False)):
        layer.scales, layer.biases = scales, biases
        cm.set_path(layer, cm.Path(decode=cm.NATIVE))
        assert layer.__dict__["_cpu_native"]
        assert (layer.__dict__["_cpu_half"][2] is not None) == exact
        want = mx.quantized_matmul(x, layer.weight, scales, biases, group_size=32, bits=4)
        assert mx.allclose(layer(x), want, rtol=1e-5, atol=1e-6).item()
    # Scales replaced after the path was set (a recast): the layer's own are read.
    layer.scales, layer.biases = halves
    cm.set_path(layer, cm.Path(decode=cm.NATIVE))
    layer.scales = halves[0] * 2
    want = mx.quantized_matmul(x, layer.weight, layer.scales, layer.biases, group_size=32, bits=4)
    assert mx.allclose(layer(x), want, rtol=1e-5, atol=1e-6).item()
    cm.set_path(layer, cm.Path())
    assert "_cpu_half" not in layer.__dict__
