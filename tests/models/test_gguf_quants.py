"""GGUF tensor types -> MLX: exact repacks, measured requantization, the packing itself.

Files are written with ``gguf``'s writer (K-quant blocks made by hand in
kquants.py); ``gguf.quants.dequantize`` (llama.cpp's reference decode) is the
judge of what each file holds.
"""

from __future__ import annotations

import json

import gguf
import mlx.core as mx
import numpy as np
import pytest

from mlxchat.models.gguf.header import read_header
from mlxchat.models.gguf.quants import PLANS, REQUANT_ERROR, pack, to_mlx

from tests.models.gguf_files import encode

REPACKED = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K"]
REQUANTIZED = ["Q6_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS"]
MLX_WIDTHS = (2, 3, 4, 5, 6, 8)


def weights(rows: int = 16, cols: int = 512, seed: int = 3) -> np.ndarray:
    """Gaussian weights with a few outlier columns, like real projections."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
    x[:, rng.integers(0, cols, 4)] *= 8
    return x


def one_tensor_file(tmp_path, x: np.ndarray, kind: str):
    path = tmp_path / f"{kind}.gguf"
    raw, _ = encode(x, kind)
    w = gguf.GGUFWriter(path, "llama")
    raw_dtype = None if kind in ("F32", "F16") else gguf.GGMLQuantizationType[kind]
    w.add_tensor("blk.0.ffn_down.weight", raw, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    t = read_header(path).tensors[0]
    held = gguf.quants.dequantize(np.asarray(t.data), gguf.GGMLQuantizationType[t.type_name])
    return t, held.reshape(t.shape).astype(np.float32)


def mlx_values(parts: dict[str, mx.array], bits: int) -> np.ndarray:
    return np.array(mx.dequantize(parts["weight"], parts["scales"].astype(mx.float32),
                                  parts["biases"].astype(mx.float32), group_size=32,
                                  bits=bits))


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("bits", MLX_WIDTHS)
def test_pack_is_mlx_layout(bits):
    codes = np.random.default_rng(bits).integers(0, 2 ** bits, (4, 64)).astype(np.uint8)
    got = mx.dequantize(mx.array(pack(codes, bits)), mx.ones((4, 2)), mx.zeros((4, 2)),
                        group_size=32, bits=bits)
    assert np.array_equal(np.array(got), codes)


@pytest.mark.parametrize("kind", REPACKED)
def test_repack_is_exact(tmp_path, kind):
    x = weights()
    t, held = one_tensor_file(tmp_path, x, kind)
    assert t.type_name == kind and t.shape == x.shape
    parts = to_mlx(t)
    assert parts["weight"].dtype == mx.uint32
    assert parts["weight"].shape == (16, 512 * PLANS[kind].bits // 32)
    assert np.abs(mlx_values(parts, PLANS[kind].bits) - held).max() == 0.0
    assert rel(held, x) > 1e-3  # the file really is quantized: the check above is not trivial


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
def test_legacy_repack_equals_what_mx_load_gave(tmp_path, kind):
    """The bundled Q4_1/Q8_0 model converts to the very arrays of the old mx.load path."""
    t, _ = one_tensor_file(tmp_path, weights(), kind)
    ours = to_mlx(t)
    theirs = mx.load(str(tmp_path / f"{kind}.gguf"))
    for part in ("weight", "scales", "biases"):
        a, b = ours[part], theirs[f"blk.0.ffn_down.{part}"]
        assert a.dtype == b.dtype and mx.array_equal(a, b).item(), part


def test_mxfp4_repack_is_exact_in_mlx_mxfp4_mode(tmp_path):
    x = weights()
    t, held = one_tensor_file(tmp_path, x, "MXFP4")
    parts = to_mlx(t)
    assert set(parts) == {"weight", "scales"} and parts["scales"].dtype == mx.uint8
    got = mx.dequantize(parts["weight"], parts["scales"], group_size=32, bits=4,
                        mode="mxfp4").astype(mx.float32)  # e2m1 times 2**k: exact
    assert np.array_equal(np.array(got), held)
    # and it is what MLX itself makes of those values
    w, s = mx.quantize(mx.array(held), group_size=32, bits=4, mode="mxfp4")
    assert mx.array_equal(w, parts["weight"]).item() and mx.array_equal(s, parts["scales"]).item()


@pytest.mark.parametrize("kind", REQUANTIZED)
def test_requantized_within_stated_error(tmp_path, kind):
    x = weights()
    t, held = one_tensor_file(tmp_path, x, kind)
    bits = PLANS[kind].bits
    err = rel(mlx_values(to_mlx(t), bits), held)
    assert 0 < err <= REQUANT_ERROR[kind]


@pytest.mark.parametrize("kind", REQUANTIZED)
def test_requantized_width_is_the_smallest_that_keeps_quality(tmp_path, kind):
    """Against the float weights the file came from, the chosen width adds at most 5%
    to the file's own error, and the next smaller MLX width adds more."""
    x = weights()
    _, held = one_tensor_file(tmp_path, x, kind)
    own = rel(held, x)

    def total(bits: int) -> float:
        w, s, b = mx.quantize(mx.array(held), group_size=32, bits=bits)
        return rel(np.array(mx.dequantize(w, s, b, group_size=32, bits=bits)), x)

    chosen = PLANS[kind].bits
    smaller = MLX_WIDTHS[MLX_WIDTHS.index(chosen) - 1]
    assert total(chosen) <= own * 1.05
    assert total(smaller) > own * 1.05


def test_float_types_stay_floats(tmp_path):
    x = weights(4, 64)
    t, held = one_tensor_file(tmp_path, x, "F16")
    out = to_mlx(t)["weight"]
    assert out.dtype == mx.float16 and np.array_equal(np.array(out, np.float32), held)
    bf = tmp_path / "bf16.gguf"
    w = gguf.GGUFWriter(bf, "llama")
    w.add_tensor("t", gguf.quants.quantize(x, gguf.GGMLQuantizationType.BF16),
                 raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    t = read_header(bf).tensors[0]
    out = to_mlx(t)["weight"]
    expected = gguf.quants.dequantize(np.asarray(t.data), gguf.GGMLQuantizationType.BF16)
    assert out.dtype == mx.bfloat16  # not narrowed to float16 as mx.load did
    assert np.array_equal(np.array(out.astype(mx.float32)), expected.reshape(x.shape))


def test_q4_k_m_mix_keeps_each_tensor_width(tmp_path):
    """A Q4_K_M-like file: Q4_K layers, Q6_K output and some ffn_down, a Q5_0 attn_v."""
    from mlxchat.models import import_gguf, load_model

    from tests.models.gguf_files import random_params, write_model
    from tests.models.test_gguf_arch import BASE, metadata, reference_logits
    from tests.models.test_gguf_import import IDS, rel_error

    config = {**BASE, "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
              "rope_theta": 10000.0}
    params = random_params("llama", config, seed=2)
    kinds = {"output": "Q6_K", "blk.0.ffn_down": "Q6_K", "blk.1.attn_v": "Q5_0"}
    path = tmp_path / "q4_k_m.gguf"
    held = write_model(path, "llama", params, config, metadata("llama", config),
                       kind="Q4_K", kinds=kinds)
    loaded = load_model(str(path))
    layers = loaded.model.model.layers
    assert (layers[0].self_attn.q_proj.bits, layers[0].mlp.down_proj.bits) == (4, 8)
    assert (layers[1].mlp.down_proj.bits, layers[1].self_attn.v_proj.bits) == (4, 5)
    assert loaded.model.lm_head.bits == 8 and loaded.model.model.embed_tokens.bits == 4
    err = rel_error(loaded.model(mx.array(IDS)[None]), reference_logits("llama", config, held))
    assert err < 0.02  # only the two Q6_K tensors were requantized (8-bit)

    report = json.loads((import_gguf(path) / "mlxchat-import.json").read_text())["tensor_types"]
    assert report["Q4_K"]["became"] == "int4 g32 (repack)"
    assert report["Q6_K"]["became"] == "int8 g32 (requantize)"
    assert report["Q5_0"]["became"] == "int5 g32 (repack)"
    assert report["F32"]["became"] == "float32"
    # 4-bit codes + float32 scale and bias per 32 values; 5-bit with float16 scale/bias
    assert report["Q4_K"]["bits_per_weight"] == 4 + 64 / 32
    assert report["Q5_0"]["bits_per_weight"] == 5 + 32 / 32
    assert sum(r["tensors"] for r in report.values()) == len(params)


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", "Q5_0"])
def test_conversion_in_row_chunks_is_the_same(tmp_path, kind, monkeypatch):
    """Big tensors are converted a few rows at a time (bounded memory): same arrays."""
    from mlxchat.models.gguf import quants as gguf_quants

    t, _ = one_tensor_file(tmp_path, weights(rows=12), kind)
    whole = to_mlx(t)
    monkeypatch.setattr(gguf_quants, "CHUNK_VALUES", 512 * 5)  # 5 rows a chunk: 3 chunks
    chunked = to_mlx(t)
    for part in ("weight", "scales", "biases"):
        assert mx.array_equal(whole[part], chunked[part]).item(), part


def test_gpu_policy_casts_exact_float32_scales_to_bfloat16(tmp_path):
    """What the loader does on a GPU for this family (this machine has none:
    called directly): every float parameter in the training dtype."""
    from mlxchat.models import load_model, precision

    from tests.models.gguf_files import random_params, write_model
    from tests.models.test_gguf_arch import BASE, metadata
    from tests.models.test_gguf_import import IDS, rel_error

    config = {**BASE, "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
              "rope_theta": 10000.0}
    path = tmp_path / "k.gguf"
    write_model(path, "llama", random_params("llama", config), config,
                metadata("llama", config), kind="Q4_K")
    model = load_model(str(path)).model
    before = model(mx.array(IDS)[None])
    q = model.model.layers[0].self_attn.q_proj
    assert q.scales.dtype == mx.float32
    gpu = precision.default_dtype({"model_type": "llama"}, cpu=False)
    precision.apply(model, gpu)
    assert (q.scales.dtype, q.biases.dtype) == (mx.bfloat16, mx.bfloat16)
    assert model.model.norm.weight.dtype == mx.bfloat16
    # bfloat16 activations on a random tiny model: measured 0.13 (a wrong layout gives ~1)
    assert 0 < rel_error(model(mx.array(IDS)[None]).astype(mx.float32), before) < 0.3
