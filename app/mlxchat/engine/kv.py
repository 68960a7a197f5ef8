"""KV cache accounting and reshaping on top of mlx-lm's cache classes."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models.cache import ArraysCache, KVCache, QuantizedKVCache


def offset(cache: list[Any]) -> int:
    """Tokens held: every attention layer holds the same number (recurrent
    ``ArraysCache`` layers of hybrid models keep a state, not positions)."""
    for c in cache:
        if hasattr(c, "offset"):
            return int(c.offset)
    return 0


def _used_fraction(arr: mx.array, used: int) -> int:
    """Bytes of the first ``used`` positions of a (B, H, T, D) array."""
    return arr.nbytes * used // arr.shape[-2] if arr.shape[-2] else 0


def kv_bytes(cache: list[Any]) -> int:
    """Bytes the cache holds for its used length, summed from its arrays.

    mlx-lm allocates in 256-slot steps; the unused tail is not counted.
    """
    total = 0
    for c in cache:
        if isinstance(c, ArraysCache):
            total += sum(a.nbytes for a in c.cache if a is not None)
            continue
        keys = getattr(c, "keys", None)
        if keys is None:
            continue
        used = min(int(c.offset), _seq_len(c))
        for _, arr in tree_flatten((c.keys, c.values)):
            total += _used_fraction(arr, used)
    return total


def _seq_len(c: Any) -> int:
    keys = c.keys[0] if isinstance(c.keys, (tuple, list)) else c.keys
    return keys.shape[-2]


def bits(cache: list[Any]) -> int | None:
    """The KV bit width when quantized, else None (the model's dtype)."""
    for c in cache:
        if isinstance(c, QuantizedKVCache):
            return c.bits
    return None


_FLOAT_LABELS = {mx.float16: "fp16", mx.bfloat16: "bf16", mx.float32: "fp32"}


def dtype_label(cache: list[Any], empty: str = "-") -> str:
    """'fp16', '4-bit', or '4-bit (3 of 4 layers)' when some layers (sliding
    windows, recurrent states) cannot be quantized; ``empty`` when the cache
    holds nothing yet."""
    b = bits(cache)
    if b:
        quantized = sum(isinstance(c, QuantizedKVCache) for c in cache)
        return f"{b}-bit" if quantized == len(cache) else \
            f"{b}-bit ({quantized} of {len(cache)} layers)"
    for c in cache:
        if getattr(c, "keys", None) is not None:
            return _FLOAT_LABELS.get(c.keys.dtype, str(c.keys.dtype))
    return empty


def activation_label(model: Any) -> str:
    """The float type a model computes in, so its KV cache's before it holds
    anything: its first floating-point parameter's (a quantized layer's scales,
    or a plain weight), as 'fp16', 'bf16' or 'fp32'; '-' when it has none."""
    for _, value in tree_flatten(model.parameters()):
        if mx.issubdtype(value.dtype, mx.floating):
            return _FLOAT_LABELS.get(value.dtype, str(value.dtype))
    return "-"


def group_size_for(head_dim: int) -> int:
    """mx.quantize wants the last axis divisible by the group size."""
    return 64 if head_dim % 64 == 0 else 32


def quantize(cache: list[Any], kv_bits: int, head_dim: int) -> list[Any]:
    """Plain KVCache layers -> QuantizedKVCache at ``kv_bits`` (others kept)."""
    group = group_size_for(head_dim)
    return [c.to_quantized(group_size=group, bits=kv_bits) if isinstance(c, KVCache) else c
            for c in cache]


def probe_bytes_per_token(model: Any, kv_bits: int | None, head_dim: int) -> int:
    """What one more token adds to a fresh cache, read from its arrays (fed one
    token, then a second; a recurrent layer's fixed state cancels out)."""
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    sizes = []
    for token in (0, 1):
        model(mx.array([[token]]), cache=cache)
        mx.eval([c.state for c in cache])
        sizes.append(kv_bytes(quantize(cache, kv_bits, head_dim) if kv_bits else cache))
    return sizes[1] - sizes[0]


def trimmed_copy(cache: list[Any]) -> list[Any]:
    """Cache objects whose arrays stop at the used length, for saving to disk."""
    out = []
    for c in cache:
        n = int(getattr(c, "offset", 0))
        if isinstance(c, QuantizedKVCache):
            q = QuantizedKVCache(group_size=c.group_size, bits=c.bits)
            if c.keys is not None:
                q.keys = tuple(a[..., :n, :] for a in c.keys)
                q.values = tuple(a[..., :n, :] for a in c.values)
            q.offset = n
            out.append(q)
        elif isinstance(c, KVCache):
            k = KVCache()
            if c.keys is not None:
                k.keys, k.values = c.keys[..., :n, :], c.values[..., :n, :]
            k.offset = n
            out.append(k)
        else:
            out.append(c)
    return out
