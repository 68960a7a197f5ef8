"""KV cache accounting and reshaping on top of mlx-lm's cache classes."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from mlxchat.engine.kv.layers import row


def offset(cache: list[Any]) -> int:
    """Tokens held: every layer that holds positions holds the same number
    (recurrent layers of hybrid models keep a state, not positions)."""
    return next((n for c in cache if (n := row(c).length(c)) is not None), 0)


def kv_bytes(cache: list[Any]) -> int:
    """Bytes the cache holds for its used length, summed from its arrays."""
    return sum(row(c).nbytes(c) for c in cache)


def bits(cache: list[Any]) -> int | None:
    """The KV bit width when quantized, else None (the model's dtype)."""
    return next((b for c in cache if (b := row(c).bits(c)) is not None), None)


def trimmable(cache: list[Any]) -> bool:
    """Every layer can give tokens back now."""
    return all(row(c).trimmable(c) for c in cache)


_FLOAT_LABELS = {mx.float16: "fp16", mx.bfloat16: "bf16", mx.float32: "fp32"}


def dtype_label(cache: list[Any], empty: str = "-") -> str:
    """'fp16', '4-bit', or '4-bit (3 of 4 layers)' when some layers (sliding
    windows, recurrent states) cannot be quantized; ``empty`` when the cache
    holds nothing yet."""
    b = bits(cache)
    if b:
        quantized = sum(row(c).bits(c) is not None for c in cache)
        return f"{b}-bit" if quantized == len(cache) else \
            f"{b}-bit ({quantized} of {len(cache)} layers)"
    dtype = next((d for c in cache if (d := row(c).dtype(c)) is not None), None)
    return empty if dtype is None else _FLOAT_LABELS.get(dtype, str(dtype))


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
    """Layers that can be quantized (plain KVCache) at ``kv_bits``; others kept.
    A head size MLX cannot quantize is refused in one line (EngineError)."""
    if head_dim % 32:
        from mlxchat.engine.events import EngineError

        raise EngineError(f"kv_bits {kv_bits} needs a head size that is a multiple of 32; this "
                          f"model's is {head_dim}, so its KV cache cannot be quantized "
                          "(set kv_bits to none)")
    group = group_size_for(head_dim)
    return [row(c).quantize(c, kv_bits, group) for c in cache]


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
