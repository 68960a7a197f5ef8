"""The native kernel (mlxchat.native, built by `make test` through `make model`)
computes x @ dequantize(w).T as quantized_matmul does, within float32 rounding:
every bits (2-6 and 8: Q5_0 imports are 5-bit) x group size x scales dtype it takes, row counts on and off the
vector width, leading batch axes, non-contiguous inputs, one thread and the
pool, and each instruction set this CPU has."""

from __future__ import annotations

import sys

import mlx.core as mx
import pytest

from mlxchat import native

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="built on Linux only (Metal serves macOS)")

ROWS = (1, 3, 8, 17, 33)
SCALES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


@pytest.fixture(scope="module")
def kernel():
    status = native.status()
    assert status.available, status.note  # `make test` builds it (make model)
    return native.module()


def _quantized(out: int, width: int, bits: int, group: int, dtype, seed: int):
    mx.random.seed(seed)
    w = mx.random.normal((out, width)) * 0.1
    wq, scales, biases = mx.quantize(w, group_size=group, bits=bits)
    return wq, scales.astype(dtype), biases.astype(dtype)


def _close(got: mx.array, want: mx.array) -> float:
    return float(mx.abs(got - want).max().item()) / max(float(mx.abs(want).max().item()), 1e-30)


@pytest.mark.parametrize("scales", list(SCALES))
@pytest.mark.parametrize("group", (32, 64, 128))
@pytest.mark.parametrize("bits", (2, 3, 4, 5, 6, 8))
def test_the_kernel_matches_quantized_matmul(kernel, bits, group, scales):
    # An odd count of groups and of outputs: nothing lines up with a vector or a block.
    wq, s, b = _quantized(37, group * 3, bits, group, SCALES[scales], seed=bits * group)
    for rows in ROWS:
        x = mx.random.normal((rows, group * 3))
        want = mx.quantized_matmul(x, wq, s, b, group_size=group, bits=bits)
        got = kernel.qmm(x, wq, s, b, group, bits)
        assert got.dtype == mx.float32 and got.shape == want.shape
        assert _close(got, want) <= 1e-5, (rows, bits, group, scales)
        if scales == "float32":  # and the dequantized weight through a plain matmul
            dense = mx.dequantize(wq, s, b, group_size=group, bits=bits, dtype=mx.float32)
            assert _close(got, x @ dense.T) <= 1e-5


@pytest.mark.parametrize("isa", ("generic", "avx2", ""))
def test_every_instruction_set_and_the_pool_agree(kernel, isa):
    if isa == "avx2" and kernel.qmm_isa() == "generic":
        isa = "generic"  # not an x86 CPU with AVX2: the generic code serves
    wq, s, b = _quantized(1000, 576, 4, 64, mx.float32, seed=5)  # big enough to split
    try:
        kernel.qmm_force_isa(isa)
        for rows in (1, 4, 9):
            x = mx.random.normal((rows, 576))
            want = mx.quantized_matmul(x, wq, s, b, group_size=64, bits=4)
            assert _close(kernel.qmm(x, wq, s, b, 64, 4), want) <= 1e-5, (isa, rows)
    finally:
        kernel.qmm_force_isa("")


def test_batch_axes_views_and_the_lazy_graph(kernel):
    wq, s, b = _quantized(48, 256, 8, 32, mx.bfloat16, seed=9)
    x = mx.random.normal((2, 3, 256))
    want = mx.quantized_matmul(x, wq, s, b, group_size=32, bits=8)
    got = kernel.qmm(x, wq, s, b, 32, 8)
    assert got.shape == (2, 3, 48) and _close(got, want) <= 1e-5
    view = mx.random.normal((256, 5)).T  # not row-contiguous
    assert _close(kernel.qmm(view, wq, s, b, 32, 8),
                  mx.quantized_matmul(view, wq, s, b, group_size=32, bits=8)) <= 1e-5
    # Lazy inputs are evaluated first; the result feeds later ops and mx.compile.
    lazy = mx.random.normal((4, 256)) * 2 + 1
    fn = mx.compile(lambda a: kernel.qmm(a, wq, s, b, 32, 8).sum(-1))
    assert _close(fn(lazy), mx.quantized_matmul(lazy, wq, s, b, group_size=32, bits=8)
                  .sum(-1)) <= 1e-5


def test_what_it_does_not_take_is_refused_in_one_line(kernel):
    wq, s, b = _quantized(16, 64, 4, 32, mx.float32, seed=1)
    with pytest.raises(ValueError, match="x must be float32"):
        kernel.qmm(mx.zeros((1, 64), dtype=mx.float16), wq, s, b, 32, 4)
    with pytest.raises(ValueError, match="input width"):
        kernel.qmm(mx.zeros((1, 96)), wq, s, b, 32, 4)
    with pytest.raises(ValueError, match="bits must be 2, 3, 4, 5, 6 or 8"):
        kernel.qmm(mx.zeros((1, 64)), wq, s, b, 32, 7)


@pytest.mark.parametrize("scales", list(SCALES))
@pytest.mark.parametrize("bits", (4, 8, 5))
def test_one_row_over_many_groups_matches(kernel, bits, scales):
    # Decode's path: 37 groups (vectors of scales and of group sums, then a
    # tail), 4-row blocks and the rows left over, each instruction set.
    wq, s, b = _quantized(39, 32 * 37, bits, 32, SCALES[scales], seed=bits)
    x = mx.random.normal((1, 32 * 37))
    want = mx.quantized_matmul(x, wq, s, b, group_size=32, bits=bits)
    try:
        for isa in ("generic", "avx2", ""):
            kernel.qmm_force_isa(isa if kernel.qmm_isa() != "generic" else "generic")
            assert _close(kernel.qmm(x, wq, s, b, 32, bits), want) <= 1e-5, (isa, bits)
    finally:
        kernel.qmm_force_isa("")


@pytest.mark.parametrize("asked,most", [("100000000", 256), ("zero", None), ("-3", None)])
def test_a_hostile_thread_count_is_bounded(asked, most):
    """MLXCHAT_KERNEL_THREADS past reason is capped (each would be a thread);
    garbage or a negative one takes the default; the kernel still computes."""
    import os
    import subprocess

    code = ("import mlxchat, mlx.core as mx\nfrom mlxchat import native\n"
            "m = native.module()\nw, s, b = mx.quantize(mx.ones((64, 64)), group_size=32, bits=4)\n"
            "y = m.qmm(mx.ones((1, 64)), w, s, b, 32, 4)\n"
            "print(m.threads(), float(y.sum().item()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MLXCHAT_KERNEL_THREADS": asked})
    assert out.returncode == 0, out.stderr[-800:]
    threads, total = out.stdout.split()
    assert 1 <= int(threads) <= (most or len(os.sched_getaffinity(0)))
    assert float(total) == pytest.approx(64 * 64, rel=1e-4)
