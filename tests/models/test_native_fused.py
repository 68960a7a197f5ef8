"""The native fused ops (mlxchat.native, built by `make test` through `make
model`) compute what MLX's own mx.fast.rms_norm, rope and
scaled_dot_product_attention compute on the CPU (there: composed of primitive
ops), within float32 rounding: random inputs, several shapes, offsets,
dtypes, views; and the wrappers hand a call MLX's own function whenever the
kernel does not take it."""

from __future__ import annotations

import sys

import mlx.core as mx
import pytest

from mlxchat import native
from mlxchat.native import fused

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="built on Linux only (Metal serves macOS)")

DTYPES = {"float32": (mx.float32, 2e-6), "float16": (mx.float16, 2e-3),
          "bfloat16": (mx.bfloat16, 1e-2)}


@pytest.fixture(scope="module")
def kernel():
    status = native.status()
    assert status.available, status.note  # `make test` builds it (make model)
    return native.module()


def _close(got: mx.array, want: mx.array) -> float:
    got, want = got.astype(mx.float32), want.astype(mx.float32)
    return float(mx.abs(got - want).max().item()) / max(float(mx.abs(want).max().item()), 1e-30)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_rms_norm_matches_mlx(kernel, dtype):
    dt, tol = DTYPES[dtype]
    mx.random.seed(1)
    for shape in ((1, 1, 576), (2, 7, 64), (3, 100)):
        x = (mx.random.normal(shape) * 3).astype(dt)
        w = mx.random.normal((shape[-1],)).astype(dt)
        got = kernel.rms_norm(x, w, 1e-5)
        assert got.dtype == dt and got.shape == x.shape
        assert _close(got, fused.original("rms_norm")(x, w, 1e-5)) <= tol, shape
    view = mx.random.normal((64, 5)).astype(dt).T  # a strided last axis
    w = mx.ones((64,), dtype=dt)
    assert _close(kernel.rms_norm(view, w, 1e-6),
                  fused.original("rms_norm")(view, w, 1e-6)) <= tol


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("traditional", (False, True))
def test_rope_matches_mlx(kernel, dtype, traditional):
    dt, tol = DTYPES[dtype]
    rope = fused.original("rope")
    mx.random.seed(2)
    # (B, H, T, D) as mlx-lm hands it: a transposed view of (B, T, H, D).
    x = mx.random.normal((2, 5, 3, 64)).astype(dt).transpose(0, 2, 1, 3)
    for dims, offset, scale in ((64, 0, 1.0), (32, 37, 1.0), (64, 1999, 0.25), (16, 3, 2.0)):
        got = kernel.rope(x, dims, traditional, 10000.0, scale, mx.array(offset, mx.int32))
        want = rope(x, dims, traditional=traditional, base=10000.0, scale=scale, offset=offset)
        assert got.dtype == dt and got.shape == x.shape
        assert _close(got, want) <= max(tol, 1e-4), (dims, offset, scale)
    freqs = mx.random.uniform(1.0, 500.0, (16,))
    offsets = mx.array([4, 300], mx.int32)  # one per batch row
    got = kernel.rope(x, 32, traditional, None, 1.0, offsets, freqs)
    want = rope(x, 32, traditional=traditional, base=None, scale=1.0, offset=offsets,
                freqs=freqs)
    assert _close(got, want) <= max(tol, 1e-4)
    three = mx.random.normal((2, 6, 32)).astype(dt)  # (B, T, D): no head axis
    assert _close(kernel.rope(three, 32, traditional, 500.0, 1.0, mx.array(9, mx.int32)),
                  rope(three, 32, traditional=traditional, base=500.0, scale=1.0,
                       offset=9)) <= max(tol, 1e-4)


def _attention_inputs(b, hq, hkv, length, keys, d, seed):
    mx.random.seed(seed)
    q = mx.random.normal((b, length, hq, d)).transpose(0, 2, 1, 3)
    k = mx.random.normal((b, hkv, keys + 40, d))[:, :, :keys]  # a cache's slice of its buffer
    v = mx.random.normal((b, hkv, keys, d))
    return q, k, v


@pytest.mark.parametrize("isa", ("generic", ""))
@pytest.mark.parametrize("shape", ((1, 9, 3, 1, 300, 64), (1, 9, 3, 19, 300, 64),
                                   (2, 4, 1, 5, 41, 256), (1, 8, 8, 3, 3, 32),
                                   (1, 4, 2, 64, 600, 16)))
def test_attention_matches_mlx(kernel, shape, isa):
    q, k, v = _attention_inputs(*shape, seed=sum(shape))
    b, hq, _, length, keys, _ = shape
    sdpa = fused.original("scaled_dot_product_attention")
    masks = (None, "causal", mx.random.uniform(shape=(length, keys)) > 0.3,
             mx.random.normal((b, 1, length, keys)), mx.random.normal((hq, length, keys)))
    try:
        kernel.sdpa_force_isa(isa)
        for mask in masks:
            if isinstance(mask, str) or mask is None:
                got = kernel.sdpa(q, k, v, 0.125, mask or "")
            else:
                got = kernel.sdpa(q, k, v, 0.125, "", mask)
            want = sdpa(q, k, v, scale=0.125, mask=mask)
            assert got.shape == want.shape
            assert _close(got, want) <= 1e-5, (shape, None if mask is None else
                                               getattr(mask, "dtype", mask))
    finally:
        kernel.sdpa_force_isa("")


def test_what_the_kernels_do_not_take_goes_to_mlx(kernel):
    assert fused.install()
    q, k, v = _attention_inputs(1, 4, 2, 2, 10, 16, seed=3)
    sinks = mx.zeros((4,))
    half = q.astype(mx.float16)
    for args, kw in (((q, k, v), {"scale": 0.5, "mask": "causal", "sinks": sinks}),
                     ((half, k.astype(mx.float16), v.astype(mx.float16)), {"scale": 0.5})):
        got = mx.fast.scaled_dot_product_attention(*args, **kw)
        want = fused.original("scaled_dot_product_attention")(*args, **kw)
        assert mx.array_equal(got, want)
    x, w = mx.random.normal((2, 8)), mx.ones((8,), dtype=mx.float16)  # mixed dtypes
    assert mx.array_equal(mx.fast.rms_norm(x, w, 1e-5),
                          fused.original("rms_norm")(x, w, 1e-5))
    with pytest.raises(ValueError, match="dims must be even"):
        kernel.rope(mx.zeros((1, 1, 2, 8)), 3, False, 10000.0, 1.0, mx.array(0, mx.int32))
    with pytest.raises(ValueError, match="float32"):
        kernel.sdpa(half, k, v, 1.0)


def _address(a: mx.array) -> int:
    import numpy as np

    view = np.array(a, copy=False)  # the buffer itself (released before the next step)
    return view.__array_interface__["data"][0]


def test_attention_reads_a_kv_caches_buffers_in_place_of_its_slices(kernel):
    """KVCache's returned slices are read as the first `offset` rows of its
    buffers (no Slice op), the buffers are still written in place step after
    step, and the result is MLX's own attention on the slices."""
    import io
    import re

    from mlx_lm.models.cache import KVCache

    assert fused.install()
    mx.random.seed(8)
    cache = KVCache()
    cache.update_and_fetch(mx.random.normal((1, 2, 5, 16)), mx.random.normal((1, 2, 5, 16)))
    mx.eval(cache.keys, cache.values)
    where = set()
    for step in range(4):
        q = mx.random.normal((1, 4, 1, 16))
        new_k = mx.random.normal((1, 1, 2, 16)).transpose(0, 2, 1, 3)  # a view, as models give
        k, v = cache.update_and_fetch(new_k, mx.random.normal((1, 2, 1, 16)))
        assert k.shape == (1, 2, 6 + step, 16) and cache.keys.shape[2] == 256
        want = fused.original("scaled_dot_product_attention")(q, k, v, scale=0.25)
        got = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25)
        dot = io.StringIO()
        mx.export_to_dot(dot, got)
        ops = re.findall(r'label ="([^"]+)", shape=rectangle', dot.getvalue())
        assert "Slice" not in ops and ops.count("SliceUpdate") == 2, ops
        mx.eval(got, want, cache.keys, cache.values)
        assert _close(got, want) <= 1e-5
        del k, v, want
        where.add((_address(cache.keys), _address(cache.values)))
    assert len(where) == 1  # written in place: no copy of the cache a step
    # Values changed after the fetch are read as given, not from the buffer.
    q = mx.random.normal((1, 4, 1, 16))
    k, v = cache.update_and_fetch(mx.random.normal((1, 2, 1, 16)), mx.random.normal((1, 2, 1, 16)))
    got = mx.fast.scaled_dot_product_attention(q, k, v * 2, scale=0.25)
    want = fused.original("scaled_dot_product_attention")(q, k, v * 2, scale=0.25)
    assert _close(got, want) <= 1e-5
