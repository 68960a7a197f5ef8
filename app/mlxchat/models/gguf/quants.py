"""GGUF tensor types -> MLX arrays.

Every ggml type we take becomes what ``nn.QuantizedLinear`` /
``QuantizedEmbedding`` hold (affine ``weight``/``scales``/``biases``, group
size 32) or a plain float array:

- Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 are affine per 32 values: repacked exactly,
  float16 scales as in the file.
- Q4_K and Q5_K are affine per 32 values with a 6-bit scale and min per
  sub-block: repacked exactly (scale = d*sc, bias = -dmin*m) into 4/5-bit,
  with float32 scales (d*sc does not fit float16 exactly).
- MXFP4 (gpt-oss's experts) is MLX's own ``mxfp4`` mode: e2m1 codes with an
  e8m0 scale per 32 values, repacked exactly (codes reordered, scale bytes kept).
- Q6_K, Q3_K and Q2_K use 16-value groups, and IQ4_NL/IQ4_XS a non-linear grid,
  which MLX does not take: the file's values (``gguf.quants.dequantize``) are
  quantized again by MLX to the width in ``PLANS`` (the smallest that adds at
  most 5% to the file's own error, measured; see the README table).
- The 2- and 3-bit i-quants are refused (``REFUSED``).
- F32, F16 and BF16 stay floats of their own type.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from mlxchat.models.errors import ModelError

GROUP_SIZE = 32


@dataclass(frozen=True)
class TensorPlan:
    how: str
    """'float', 'repack' (exact) or 'requantize' (dequantize, quantize again)."""
    bits: int | None = None
    mode: str = "affine"
    """MLX's quantization mode: 'affine' (scales and biases) or 'mxfp4'."""


PLANS: dict[str, TensorPlan] = {
    "F32": TensorPlan("float"), "F16": TensorPlan("float"), "BF16": TensorPlan("float"),
    "Q4_0": TensorPlan("repack", 4), "Q4_1": TensorPlan("repack", 4), "Q5_0": TensorPlan("repack", 5),
    "Q5_1": TensorPlan("repack", 5), "Q8_0": TensorPlan("repack", 8),
    "Q4_K": TensorPlan("repack", 4), "Q5_K": TensorPlan("repack", 5),
    "Q6_K": TensorPlan("requantize", 8), "Q3_K": TensorPlan("requantize", 5),
    "Q2_K": TensorPlan("requantize", 4),
    "MXFP4": TensorPlan("repack", 4, "mxfp4"),
    "IQ4_NL": TensorPlan("requantize", 6), "IQ4_XS": TensorPlan("requantize", 6),
}
REQUANT_ERROR = {"Q6_K": 0.01, "Q3_K": 0.05, "Q2_K": 0.1, "IQ4_NL": 0.04, "IQ4_XS": 0.04}
"""Stated bound of the requantization's relative error against the file's own values
(measured on Gaussian weights with outliers: Q6_K 0.005, Q3_K 0.037, Q2_K 0.079,
IQ4_NL and IQ4_XS 0.027)."""
SUPPORTED_HINT = ("F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, "
                  "Q6_K, MXFP4, IQ4_NL and IQ4_XS are supported")
REFUSED = ("2- and 3-bit i-quants pick each group from a lattice codebook MLX has no "
           "layout for, and no requantization width is measured for them here; use an "
           "IQ4_XS, Q4_K_M or larger file")


def check_tensor(t) -> None:
    """Raise ModelError unless tensor info ``t`` has a type and shape we convert."""
    if t.type_name not in PLANS:
        if t.type_name.startswith(("IQ1", "IQ2", "IQ3")):
            raise ModelError(f"tensor {t.name} is {t.type_name}: {REFUSED}")
        raise ModelError(f"tensor {t.name} is {t.type_name}: {t.type_name} tensors are not "
                         f"supported; {SUPPORTED_HINT}")
    if PLANS[t.type_name].bits and t.shape[-1] % GROUP_SIZE:
        raise ModelError(f"tensor {t.name} has {t.shape[-1]} columns, not a multiple of "
                         f"{GROUP_SIZE}: corrupt file?")


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """MLX's packing of unsigned ``bits``-wide values (rows, cols) into uint32 words:
    a little-endian bit stream per row, value i at bits [i*bits, (i+1)*bits)."""
    rows, cols = q.shape
    q = q.astype(np.uint32)
    if 32 % bits == 0:
        per = 32 // bits
        shifts = np.arange(per, dtype=np.uint32) * bits
        return (q.reshape(rows, -1, per) << shifts).sum(axis=-1, dtype=np.uint32)
    stream = np.unpackbits(q.astype(np.uint8)[..., None], axis=-1, bitorder="little")
    stream = stream[..., :bits].reshape(rows, cols * bits)
    return np.packbits(stream, axis=-1, bitorder="little").view("<u4").reshape(rows, -1)


def _f16(raw: np.ndarray) -> np.ndarray:
    return raw.copy().view(np.float16)[:, 0]


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """ggml's 32-value nibble layout: byte j holds value j (low) and j + 16 (high)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1: bit j of the 4-byte qh is bit 4 of value j."""
    return np.unpackbits(qh, axis=-1, bitorder="little")


def _legacy(blocks: np.ndarray, name: str):
    """(q per value, scale, bias) of the 32-value legacy blocks; scale/bias float16."""
    d = _f16(blocks[:, 0:2])
    if name == "Q8_0":
        q = (blocks[:, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return q, d, d * np.float16(-128)
    if name in ("Q4_0", "Q5_0"):
        body, m = blocks[:, 2:], None
    else:
        body, m = blocks[:, 4:], _f16(blocks[:, 2:4])
    if name.startswith("Q5"):
        q = _nibbles(body[:, 4:]) | (_high_bits(body[:, :4]) << 4)
    else:
        q = _nibbles(body)
    offset = {"Q4_0": -8, "Q5_0": -16}.get(name)
    return q, d, (d * np.float16(offset) if m is None else m)


def _k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins packed into 12 bytes (Q4_K, Q5_K)."""
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.astype(np.float32), mn.astype(np.float32)


def _k_quant(blocks: np.ndarray, name: str):
    """(q per value, scale, bias) of Q4_K/Q5_K super-blocks, one row per 32 values."""
    n = len(blocks)
    d = _f16(blocks[:, 0:2]).astype(np.float32)[:, None]
    dmin = _f16(blocks[:, 2:4]).astype(np.float32)[:, None]
    sc, mn = _k_scales(blocks[:, 4:16])
    qs = blocks[:, -128:].reshape(n, 4, 32)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(n, 8, 32)
    if name == "Q5_K":
        qh = blocks[:, 16:48]
        high = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1
        q = q | (high << 4)
    return q.reshape(-1, 32), (d * sc).reshape(-1), (-(dmin * mn)).reshape(-1)


def _rows_to_mlx(raw: np.ndarray, type_name: str, cols: int) -> tuple[mx.array, ...]:
    """(weight, scales, biases) for some whole rows of raw blocks (rows, bytes per row)."""
    import gguf

    plan, rows = PLANS[type_name], raw.shape[0]
    qtype = gguf.GGMLQuantizationType[type_name]
    if plan.how == "requantize":
        values = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(rows, cols)
        return tuple(mx.quantize(mx.array(values), group_size=GROUP_SIZE, bits=plan.bits))
    blocks = np.ascontiguousarray(raw).reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])
    if plan.mode == "mxfp4":  # byte 0: the e8m0 scale; then ggml's 32-value nibble layout
        return (mx.array(pack(_nibbles(blocks[:, 1:]).reshape(rows, cols), 4)),
                mx.array(blocks[:, 0].reshape(rows, -1)))
    decode = _k_quant if type_name.endswith("_K") else _legacy
    q, scale, bias = decode(blocks, type_name)
    return (mx.array(pack(q.reshape(rows, cols), plan.bits)),
            mx.array(scale.reshape(rows, -1)), mx.array(bias.reshape(rows, -1)))


CHUNK_VALUES = 1 << 22
"""Rows are converted this many values at a time, so temporaries stay small."""


def dequantized(t) -> np.ndarray:
    """The float32 values the file holds for tensor ``t`` (llama.cpp's reference decode)."""
    import gguf

    if t.type_name in ("F32", "F16"):
        return np.asarray(t.data, np.float32).reshape(t.shape)
    values = gguf.quants.dequantize(np.asarray(t.data), gguf.GGMLQuantizationType[t.type_name])
    return values.astype(np.float32).reshape(t.shape)


def to_mlx(t) -> dict[str, mx.array]:
    """The MLX arrays for GGUF tensor ``t``: {'weight'} or {'weight','scales','biases'}."""
    plan = PLANS[t.type_name]
    if plan.how == "float":
        if t.type_name == "BF16":
            raw = np.ascontiguousarray(t.data).view(np.uint16).reshape(t.shape)
            return {"weight": mx.array(raw).view(mx.bfloat16)}
        return {"weight": mx.array(np.asarray(t.data).reshape(t.shape))}
    rows, cols = int(np.prod(t.shape[:-1])), t.shape[-1]
    raw = np.asarray(t.data).reshape(rows, -1)
    step = max(1, CHUNK_VALUES // cols)
    chunks = []
    for start in range(0, rows, step):
        chunks.append(_rows_to_mlx(raw[start:start + step], t.type_name, cols))
        mx.eval(*chunks[-1])
    shape = (*t.shape[:-1], -1)
    return {part: mx.concatenate([c[i] for c in chunks]).reshape(shape) if len(chunks) > 1
            else chunks[0][i].reshape(shape)
            for i, part in enumerate(("weight", "scales", "biases")[:len(chunks[0])])}
