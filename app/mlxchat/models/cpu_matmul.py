"""How a quantized layer multiplies on the CPU: ``quantized_matmul`` (MLX's own
kernel, no BLAS; scalar on x86), its weight dequantized for the call and
multiplied through the BLAS (``dequantized``: the float weight lives only for
that prefill chunk), a float32 copy of the weight kept beside the quantized one
(``kept``), or mlxchat's native SIMD kernel on the packed weights (``native``,
mlxchat.native: affine 2-8-bit, groups of 32/64/128, when it is built), in
float32 or with the activations rounded to int8 per block of 32 and dotted in
integers (``int8``, as llama.cpp's CPU path: not exact, within the rounding's
bound; tests/models/test_native_q8.py).

Prefill chunks and decode steps may take different paths: a layer looks at how
many rows it is given. The quantized weights stay the model's parameters (the
kept copy is a private attribute, never saved, cast or counted as a weight),
so switching back is exact and costs nothing. Only float32 activations take the
BLAS paths; any other dtype computes as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import mlx.core as mx
import mlx.nn as nn

from mlxchat import native

QUANTIZED, DEQUANTIZED, KEPT, NATIVE = "quantized", "dequantized", "kept", "native"
INT8 = "int8"
KERNEL = (NATIVE, INT8)
"""The paths the native kernel computes."""
DECODE_ROWS = 8
"""A call with at most this many rows is a decode step (or a verifying pass)."""


@dataclass(frozen=True)
class Path:
    """The path of one layer: for prefill chunks and for decode steps."""

    prefill: str = QUANTIZED
    decode: str = QUANTIZED

    @property
    def keeps(self) -> bool:
        return KEPT in (self.prefill, self.decode)


def dequantized(layer: Any) -> mx.array:
    """``layer``'s weight as float32 (out, in), as ``quantized_matmul`` reads it."""
    return mx.dequantize(layer.weight, layer.scales, layer.get("biases"),
                         group_size=layer.group_size, bits=layer.bits,
                         mode=getattr(layer, "mode", "affine"), dtype=mx.float32)


_NATIVE_SCALES = (mx.float32, mx.float16, mx.bfloat16)


def native_takes(layer: Any) -> bool:
    """Whether the native kernel is loaded and computes ``layer``'s weights."""
    return (native.module() is not None and getattr(layer, "mode", "affine") == "affine"
            and layer.bits in (2, 3, 4, 5, 6, 8) and layer.group_size in (32, 64, 128)
            and layer.weight.ndim == 2 and layer.get("biases") is not None
            and layer.scales.dtype in _NATIVE_SCALES and layer.biases.dtype == layer.scales.dtype)


def half_scales(layer: Any) -> tuple:
    """(scales, biases, float16 scales, float16 biases): the copies when
    ``layer``'s float32 scales and biases are all exact in float16 (a GGUF's
    legacy blocks: Q4_1's d and m, Q8_0's d), else None in their place. The
    native kernel reads the copies: the same values in half the bytes."""
    s, b = layer.scales, layer.biases
    if s.dtype != mx.float32 or b.dtype != mx.float32:
        return s, b, None, None
    s16, b16 = s.astype(mx.float16), b.astype(mx.float16)
    exact = mx.array_equal(s16.astype(mx.float32), s) & mx.array_equal(b16.astype(mx.float32), b)
    mx.eval(exact, s16, b16)
    return (s, b, s16, b16) if exact.item() else (s, b, None, None)


def through_native(layer: Any, x: mx.array, int8: bool = False) -> mx.array:
    """``x @ w.T`` (float32 ``x``) by the native kernel on the packed weights;
    ``int8``: ``x`` rounded to int8 per block of 32, dotted in integers."""
    s, b = layer.scales, layer.biases
    half = layer.__dict__.get("_cpu_half")
    if half is not None and half[0] is s and half[1] is b and half[2] is not None:
        s, b = half[2], half[3]  # (recast since: the layer's own)
    return native.module().qmm(x, layer.weight, s, b, layer.group_size, layer.bits, int8=int8)


def _through_blas(layer: Any, x: mx.array) -> mx.array | None:
    """``x @ w.T`` on the path this many rows take, or None for quantized_matmul."""
    path: Path = layer.__dict__.get("_cpu_path") or Path()
    rows = x.size // max(x.shape[-1], 1)
    chosen = path.decode if rows <= DECODE_ROWS else path.prefill
    if chosen == QUANTIZED or x.dtype != mx.float32:
        return None
    if chosen in KERNEL:
        return (through_native(layer, x, int8=chosen == INT8)
                if layer.__dict__.get("_cpu_native") else None)
    kept = layer.__dict__.get("_cpu_kept")
    if chosen == KEPT and kept is not None:
        return x @ kept.T
    return x @ dequantized(layer).T


class CpuQuantizedLinear(nn.QuantizedLinear):
    def __call__(self, x: mx.array) -> mx.array:
        y = _through_blas(self, x)
        if y is None:
            return super().__call__(x)
        return y + self["bias"] if "bias" in self else y


class CpuQuantizedEmbedding(nn.QuantizedEmbedding):
    """A tied head (``as_linear``); looking up rows stays as it was."""

    def as_linear(self, x: mx.array) -> mx.array:
        y = _through_blas(self, x)
        return super().as_linear(x) if y is None else y


_SWAPS = {nn.QuantizedLinear: CpuQuantizedLinear, nn.QuantizedEmbedding: CpuQuantizedEmbedding}


def quantized_layers(model: nn.Module) -> Iterator[tuple[str, Any]]:
    """(name, layer) of every plain quantized linear and embedding (subclasses
    such as a split model's sharded layers are left alone)."""
    for name, module in model.named_modules():
        if type(module) in _SWAPS or type(module) in _SWAPS.values():
            yield name, module


def shape_key(layer: Any) -> str:
    """Layers of one key cost the same: out x in, bits, group, mode."""
    out, packed = layer.weight.shape[-2:]
    width = packed * 32 // layer.bits
    return f"{out}x{width}:{getattr(layer, 'mode', 'affine')}{layer.bits}g{layer.group_size}"


def kept_bytes(layer: Any) -> int:
    out, packed = layer.weight.shape[-2:]
    return out * (packed * 32 // layer.bits) * 4


def held_bytes(model: nn.Module) -> int:
    """Bytes of the float32 copies ``model``'s layers keep now, from the arrays."""
    return sum(kept.nbytes for _, layer in quantized_layers(model)
               if (kept := layer.__dict__.get("_cpu_kept")) is not None)


def set_path(layer: Any, path: Path) -> None:
    """Give ``layer`` ``path``: its class swapped for the one that reads it, a
    float32 copy made when the path keeps one and dropped when it does not."""
    base = type(layer)
    layer.__class__ = _SWAPS.get(base, base)
    layer.__dict__["_cpu_path"] = path
    takes = bool({path.prefill, path.decode} & set(KERNEL)) and native_takes(layer)
    layer.__dict__["_cpu_native"] = takes
    half = layer.__dict__.get("_cpu_half")
    if takes and (half is None or half[0] is not layer.scales or half[1] is not layer.biases):
        layer.__dict__["_cpu_half"] = half_scales(layer)
    elif not takes:
        layer.__dict__.pop("_cpu_half", None)
    if path.keeps and layer.__dict__.get("_cpu_kept") is None:
        kept = dequantized(layer)
        mx.eval(kept)
        layer.__dict__["_cpu_kept"] = kept
    elif not path.keeps:
        layer.__dict__.pop("_cpu_kept", None)


def clear(model: nn.Module) -> None:
    """Every layer back on quantized_matmul, kept copies freed."""
    for _, layer in quantized_layers(model):
        set_path(layer, Path())
