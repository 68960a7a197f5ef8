"""The native kernel's integer path (``qmm(..., int8=True)``, cpu_matmul's
``int8``): x's rows rounded to int8 per block of 32 (a float32 scale each, as
llama.cpp's Q8_0 activations), dotted in integers with MLX's packed weights.

Its result is quantized_matmul's on the rounded activations within float32
rounding, and quantized_matmul's on x itself within the rounding's bound,
worked out per output: |y - y_f| <= sum_i |w[n, i]| * d[m, block(i)] / 2.
Every bit width x group x scales dtype, row counts for one-row decode and for
the tiled prefill, each instruction set this CPU runs, views, batch axes, lazy
inputs and mx.compile."""

from __future__ import annotations

import sys

import mlx.core as mx
import mlx.nn as nn
import pytest

from mlxchat import native
from mlxchat.models import cpu_matmul as cm

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="built on Linux only (Metal serves macOS)")

ROWS = (1, 3, 8, 17, 33)
SCALES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
ISAS = ("generic", "avx2", "avx512bw", "vnni")


@pytest.fixture(scope="module")
def kernel():
    status = native.status()
    assert status.available, status.note  # `make test` builds it (make model)
    return native.module()


def _runs(kernel) -> list[str]:
    """The instruction sets this CPU runs (forcing another is refused)."""
    found = []
    for isa in ISAS:
        try:
            kernel.q8_force_isa(isa)
            found.append(isa)
        except ValueError as exc:
            assert "does not run" in str(exc)
        finally:
            kernel.q8_force_isa("")
    return found


def _quantized(out: int, width: int, bits: int, group: int, dtype, seed: int):
    mx.random.seed(seed)
    w = mx.random.normal((out, width)) * 0.1
    wq, scales, biases = mx.quantize(w, group_size=group, bits=bits)
    return wq, scales.astype(dtype), biases.astype(dtype)


def _rounded(kernel, x: mx.array) -> tuple[mx.array, mx.array]:
    """x as the kernel rounds it (float32), and each value's half step d / 2."""
    q, d = kernel.quantize_q8(x)
    blocks = x.shape[:-1] + (x.shape[-1] // 32, 32)
    back = (q.astype(mx.float32).reshape(blocks) * d[..., None]).reshape(x.shape)
    half = mx.broadcast_to(d[..., None] / 2, blocks).reshape(x.shape)
    return back, half


def _close(got: mx.array, want: mx.array) -> float:
    return float(mx.abs(got - want).max().item()) / max(float(mx.abs(want).max().item()), 1e-30)


def _check(kernel, x, wq, s, b, group, bits, label):
    got = kernel.qmm(x, wq, s, b, group, bits, int8=True)
    back, half = _rounded(kernel, x)
    want = mx.quantized_matmul(back, wq, s, b, group_size=group, bits=bits)
    assert got.dtype == mx.float32 and got.shape == want.shape, label
    assert _close(got, want) <= 1e-5, label
    exact = mx.quantized_matmul(x, wq, s, b, group_size=group, bits=bits)
    dense = mx.dequantize(wq, s, b, group_size=group, bits=bits, dtype=mx.float32)
    bound = half @ mx.abs(dense).T + 1e-5 * float(mx.abs(exact).max().item())
    assert bool(mx.all(mx.abs(got - exact) <= bound).item()), label


def test_the_activations_round_to_int8_within_half_a_step(kernel):
    mx.random.seed(2)
    x = mx.concatenate([mx.random.normal((3, 96)) * 30, mx.zeros((3, 32))], axis=1)
    q, d = kernel.quantize_q8(x)
    assert q.dtype == mx.int8 and d.shape == (3, 4) and d.dtype == mx.float32
    assert int(mx.abs(q.astype(mx.int32)).max().item()) == 127  # each block's largest
    back, half = _rounded(kernel, x)
    assert bool(mx.all(mx.abs(back - x) <= half * (1 + 1e-6)).item())
    assert float(mx.abs(back[:, 96:]).max().item()) == 0.0 and float(d[:, 3].max().item()) == 0.0
    with pytest.raises(ValueError, match="multiple of 32"):
        kernel.quantize_q8(mx.zeros((2, 40)))
    try:  # each instruction set rounds exactly as the portable code does
        for isa in _runs(kernel):
            kernel.q8_force_isa(isa)
            again = kernel.quantize_q8(x)
            assert bool(mx.array_equal(again[0], q).item() and mx.array_equal(again[1], d).item())
    finally:
        kernel.q8_force_isa("")


@pytest.mark.parametrize("scales", list(SCALES))
@pytest.mark.parametrize("group", (32, 64, 128))
@pytest.mark.parametrize("bits", (2, 3, 4, 5, 6, 8))
def test_the_int8_kernel_matches_quantized_matmul_within_the_rounding(kernel, bits, group,
                                                                       scales):
    # Three groups, 37 outputs: nothing lines up with a vector, a band or a tile.
    wq, s, b = _quantized(37, group * 3, bits, group, SCALES[scales], seed=bits * group)
    for rows in ROWS:
        x = mx.random.normal((rows, group * 3))
        _check(kernel, x, wq, s, b, group, bits, (rows, bits, group, scales))


@pytest.mark.parametrize("bits", (4, 5, 6, 8))
def test_every_instruction_set_agrees_one_thread_and_the_pool(kernel, bits):
    runs = _runs(kernel)
    assert "generic" in runs
    wq, s, b = _quantized(1000, 576, bits, 32, mx.float16, seed=5)  # big enough to split
    small = _quantized(21, 96, bits, 32, mx.float32, seed=6)  # one thread; a 32-value tail
    try:
        for isa in runs:
            kernel.q8_force_isa(isa)
            assert kernel.q8_isa() == isa
            for rows in (1, 4, 9, 33):
                _check(kernel, mx.random.normal((rows, 576)), wq, s, b, 32, bits, (isa, rows))
                _check(kernel, mx.random.normal((rows, 96)), *small, 32, bits, (isa, rows))
    finally:
        kernel.q8_force_isa("")


def test_batch_axes_views_lazy_inputs_and_compile(kernel):
    wq, s, b = _quantized(48, 256, 4, 64, mx.bfloat16, seed=9)
    _check(kernel, mx.random.normal((2, 3, 256)), wq, s, b, 64, 4, "batch axes")
    view = mx.random.normal((256, 5)).T  # not row-contiguous
    _check(kernel, view, wq, s, b, 64, 4, "view")
    lazy = mx.random.normal((4, 256)) * 2 + 1
    fn = mx.compile(lambda a: kernel.qmm(a, wq, s, b, 64, 4, int8=True).sum(-1))
    back, _ = _rounded(kernel, lazy)
    want = mx.quantized_matmul(back, wq, s, b, group_size=64, bits=4).sum(-1)
    assert _close(fn(lazy), want) <= 1e-5


def test_the_error_against_float32_is_small(kernel):
    """What the rounding costs: relative RMS error of the outputs, measured
    0.55% on normal activations (d / 2 is about 0.9% of a block's largest
    value) and 0.93% with uneven channels (a block's scale set by its largest)."""
    wq, s, b = _quantized(512, 1024, 4, 32, mx.float32, seed=11)
    plain = mx.random.normal((16, 1024))
    uneven = mx.random.normal((16, 1024)) * mx.exp(mx.random.normal((1, 1024)))
    for x, most in ((plain, 0.007), (uneven, 0.015)):
        got = kernel.qmm(x, wq, s, b, 32, 4, int8=True)
        exact = mx.quantized_matmul(x, wq, s, b, group_size=32, bits=4)
        rms = float(mx.sqrt(mx.mean((got - exact) ** 2) / mx.mean(exact ** 2)).item())
        assert rms < most and _close(got, exact) < 0.03, rms


def test_a_layer_on_the_int8_path_computes_through_it(kernel):
    mx.random.seed(4)
    layer = nn.QuantizedLinear(128, 40, bias=True, group_size=32, bits=4)
    x = mx.random.normal((1, 20, 128))
    want = layer(x)
    cm.set_path(layer, cm.Path(prefill=cm.INT8, decode=cm.INT8))
    try:
        assert layer.__dict__["_cpu_native"]
        got = layer(x)
        back, _ = _rounded(kernel, x)
        assert _close(got, nn.QuantizedLinear.__call__(layer, back)) <= 1e-5
        assert 0 < _close(got, want) < 0.03  # rounded: close, not equal
    finally:
        cm.set_path(layer, cm.Path())
    assert _close(layer(x), want) == 0.0
