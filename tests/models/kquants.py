"""Test-only encoders for ggml's K-quant and Q5 blocks (numpy, round-to-nearest).

``gguf`` can read every type but write none of the K-quants, so the tests make
the blocks by hand: each encoder picks the integer codes and scales from float
values, lays the bytes out as ggml does (ggml-common.h block_q4_K etc.), and
``gguf.quants.dequantize`` is then the independent judge of what they mean.
Simpler than llama.cpp's quantizers (no search for the best scale), but every
block is valid.
"""

from __future__ import annotations

import numpy as np

BLOCK_BYTES = {"Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210,
               "Q5_0": 22, "Q5_1": 24}


def _h(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float16)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b, out=np.zeros(np.broadcast(a, b).shape, np.float32), where=b != 0)


def _bytes(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate([np.ascontiguousarray(p).view(np.uint8).reshape(len(p), -1)
                           for p in parts], axis=1)


def _scale_min_k4(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """Pack eight 6-bit scales and mins into 12 bytes (get_scale_min_k4's inverse)."""
    out = np.zeros((len(sc), 12), np.uint8)
    out[:, 0:4] = (sc[:, :4] & 0x3F) | ((sc[:, 4:] >> 4) << 6)
    out[:, 4:8] = (mn[:, :4] & 0x3F) | ((mn[:, 4:] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:] & 0x0F) | ((mn[:, 4:] & 0x0F) << 4)
    return out


def _affine(x: np.ndarray, levels: int, code_max: int):
    """Per-sub-block (scale, min) with codes 0..code_max, for x (n, subs, size)."""
    lo = np.minimum(x.min(-1), 0)
    scale = (x.max(-1) - lo) / levels
    d = _h(scale.max(-1) / code_max).astype(np.float32)
    dmin = _h((-lo).max(-1) / code_max).astype(np.float32)
    sc = np.clip(np.round(_div(scale, d[:, None])), 0, code_max).astype(np.uint8)
    mn = np.clip(np.round(_div(-lo, dmin[:, None])), 0, code_max).astype(np.uint8)
    step = d[:, None] * sc
    q = np.round(_div(x + (dmin[:, None] * mn)[..., None], step[..., None]))
    return d, dmin, sc, mn, np.clip(q, 0, levels).astype(np.uint8)


def _symmetric(x: np.ndarray, *, half: int, scale_div: int, code_max: int, sc_type: type):
    """Signed per-sub-block scales (to +-code_max) and codes -half..half-1 stored
    as 0..2*half-1, for x in sub-blocks of 16 (Q3_K, Q6_K)."""
    x = x.reshape(-1, 16, 16)
    scale = np.abs(x).max(-1) / scale_div
    d = _h(scale.max(-1) / code_max).astype(np.float32)
    sc = np.clip(np.round(_div(scale, d[:, None])), -code_max - 1, code_max).astype(sc_type)
    q = np.clip(np.round(_div(x, (d[:, None] * sc)[..., None])), -half, half - 1) + half
    return d, sc, q.astype(np.uint8)


def _q4_5_k(x: np.ndarray, bits: int) -> np.ndarray:
    d, dmin, sc, mn, q = _affine(x.reshape(-1, 8, 32), 2 ** bits - 1, 63)
    n = len(q)
    low = (q & 0x0F).reshape(n, 4, 2, 32)
    qs = low[:, :, 0] | (low[:, :, 1] << 4)
    parts = [_h(d), _h(dmin), _scale_min_k4(sc, mn)]
    if bits == 5:
        high = (q >> 4) & 1  # (n, 8, 32): bit j of qh[k] is sub-block j's value k
        parts.append((high << np.arange(8, dtype=np.uint8)[None, :, None]).sum(1, np.uint8))
    return _bytes(*parts, qs.reshape(n, 128))


def _q6_k(x: np.ndarray) -> np.ndarray:
    d, sc, q = _symmetric(x, half=32, scale_div=31, code_max=127, sc_type=np.int8)
    n = len(q)
    q = q.reshape(n, 2, 128)  # halves of 128 values
    ql = (q[:, :, :64] & 0x0F) | ((q[:, :, 64:] & 0x0F) << 4)
    hi = (q >> 4).reshape(n, 2, 4, 32)
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)
    return _bytes(ql.reshape(n, 128), qh.reshape(n, 64), sc, _h(d))


def _q3_k(x: np.ndarray) -> np.ndarray:
    d, sc, q = _symmetric(x, half=4, scale_div=4, code_max=31, sc_type=np.int16)
    n = len(q)
    u = q.reshape(n, 256)
    hmask = ((u >> 2).reshape(n, 8, 32) << np.arange(8, dtype=np.uint8)[None, :, None])
    low = (u & 3).reshape(n, 2, 4, 32)
    qs = low[:, :, 0] | (low[:, :, 1] << 2) | (low[:, :, 2] << 4) | (low[:, :, 3] << 6)
    s = (sc + 32).astype(np.uint8)
    scales = np.zeros((n, 12), np.uint8)
    scales[:, :8] = (s[:, :8] & 0x0F) | ((s[:, 8:] & 0x0F) << 4)
    hi = (s >> 4).reshape(n, 4, 4)  # index j = 4 * shift + byte
    scales[:, 8:] = hi[:, 0] | (hi[:, 1] << 2) | (hi[:, 2] << 4) | (hi[:, 3] << 6)
    return _bytes(hmask.sum(1, np.uint8), qs.reshape(n, 64), scales, _h(d))


def _q2_k(x: np.ndarray) -> np.ndarray:
    d, dmin, sc, mn, q = _affine(x.reshape(-1, 16, 16), 3, 15)
    n = len(q)
    low = q.reshape(n, 2, 4, 32)
    qs = low[:, :, 0] | (low[:, :, 1] << 2) | (low[:, :, 2] << 4) | (low[:, :, 3] << 6)
    return _bytes(sc | (mn << 4), qs.reshape(n, 64), _h(d), _h(dmin))


def _q5_legacy(x: np.ndarray, with_min: bool) -> np.ndarray:
    b = x.reshape(-1, 32)
    if with_min:
        lo = b.min(-1)
        d = _h((b.max(-1) - lo) / 31).astype(np.float32)
        q = np.clip(np.round(_div(b - lo[:, None], d[:, None])), 0, 31)
    else:
        idx = np.abs(b).argmax(-1)
        d = _h(b[np.arange(len(b)), idx] / -16).astype(np.float32)
        q = np.clip(np.round(_div(b, d[:, None])) + 16, 0, 31)
    q = q.astype(np.uint8)
    qs = (q[:, :16] & 0x0F) | ((q[:, 16:] & 0x0F) << 4)
    qh = np.packbits((q >> 4) & 1, axis=-1, bitorder="little")
    parts = [_h(d)] + ([_h(lo)] if with_min else []) + [qh, qs]
    return _bytes(*parts)


IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                      np.float32)


def _iq4_codes(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Nearest of the 16 non-linear IQ4 levels to x / d, packed as ggml's nibbles."""
    scaled = _div(x, d[..., None])
    q = np.abs(scaled[..., None] - IQ4_VALUES).argmin(-1).astype(np.uint8)
    q = q.reshape(-1, 32)
    return (q[:, :16] | (q[:, 16:] << 4)).reshape(*x.shape[:-1], 16)


def _iq4_nl(x: np.ndarray) -> np.ndarray:
    b = x.reshape(-1, 32)
    d = _h(b[np.arange(len(b)), np.abs(b).argmax(-1)] / -127).astype(np.float32)
    return _bytes(_h(d), _iq4_codes(b, d))


def _iq4_xs(x: np.ndarray) -> np.ndarray:
    b = x.reshape(-1, 8, 32)
    sub = b[np.arange(len(b))[:, None], np.arange(8), np.abs(b).argmax(-1)] / -127
    d = _h(np.abs(sub).max(-1) / 31).astype(np.float32)
    ls = np.clip(np.round(_div(sub, d[:, None])), -32, 31).astype(np.int16)
    codes = _iq4_codes(b, d[:, None] * ls).reshape(len(b), 128)
    u = (ls + 32).astype(np.uint16)
    high = ((u >> 4) << (2 * np.arange(8, dtype=np.uint16))).sum(-1, dtype=np.uint16)
    low = (u[:, 0::2] & 0x0F) | ((u[:, 1::2] & 0x0F) << 4)
    return _bytes(_h(d), high.astype("<u2"), low.astype(np.uint8), codes)


def encode_blocks(x: np.ndarray, kind: str) -> np.ndarray:
    """Blocks of ``kind`` for float32 ``x`` (rows, cols): uint8 (rows, bytes per row)."""
    x = np.asarray(x, np.float32)
    encoders = {"Q4_K": lambda v: _q4_5_k(v, 4), "Q5_K": lambda v: _q4_5_k(v, 5),
                "Q6_K": _q6_k, "Q3_K": _q3_k, "Q2_K": _q2_k,
                "Q5_0": lambda v: _q5_legacy(v, False), "Q5_1": lambda v: _q5_legacy(v, True),
                "IQ4_NL": _iq4_nl, "IQ4_XS": _iq4_xs}
    return encoders[kind](x).reshape(x.shape[0], -1)
