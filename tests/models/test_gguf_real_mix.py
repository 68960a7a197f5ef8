"""The tensor-type mix of llama.cpp's Gemma 3 270M Q4_K_M file, on a tiny Gemma 3:
what the loaded model computes with is, layer by layer, the file's own values
(``gguf.quants.dequantize``), exactly for every type repacked and within the
stated error for the one requantized (Q6_K). bench/real_gguf.py measures the
real file the same way and against llama.cpp itself."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from mlxchat.models import load_model
from mlxchat.models.gguf.quants import PLANS, REQUANT_ERROR

from tests.models.gguf_files import random_params, write_model
from tests.models.test_gguf_arch import BASE, metadata

CONFIG = {**BASE, "model_type": "gemma3_text", "hidden_size": 256, "intermediate_size": 512,
          "head_dim": 64, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
          "query_pre_attn_scalar": 64, "sliding_window": 512, "sliding_window_pattern": 6,
          "tie_word_embeddings": True}
KINDS = {"token_embd": "Q8_0", "blk.0.attn_v": "Q8_0", "blk.0.attn_output": "Q4_K",
         "blk.1.attn_output": "Q4_K", "blk.0.ffn_down": "Q6_K", "blk.1.ffn_down": "Q4_K"}
"""As in the real file: Q5_0 q/k/gate/up (the default below), Q8_0 for the tied
embedding and some attn_v, Q4_K attn_output, ffn_down Q6_K in half the layers."""


def layer_values(layer) -> np.ndarray:
    return np.array(mx.dequantize(layer.weight, layer.scales, layer.biases,
                                  group_size=layer.group_size, bits=layer.bits,
                                  dtype=mx.float32))


def test_loaded_gemma3_q4_k_m_mix_computes_with_the_files_values(tmp_path):
    params = random_params("gemma3", CONFIG, seed=4)
    params.pop("lm_head.weight", None)
    path = tmp_path / "gemma3-q4_k_m.gguf"
    meta = metadata("gemma3", CONFIG, **{"gemma3.attention.sliding_window": 512})
    held = write_model(path, "gemma3", params, CONFIG, meta, kind="Q5_0", kinds=KINDS)
    model = load_model(str(path)).model
    seen = set()
    for i, block in enumerate(model.model.layers):
        for part, gguf_part, module in (("self_attn.q_proj", "attn_q", block.self_attn.q_proj),
                                        ("self_attn.k_proj", "attn_k", block.self_attn.k_proj),
                                        ("self_attn.v_proj", "attn_v", block.self_attn.v_proj),
                                        ("self_attn.o_proj", "attn_output", block.self_attn.o_proj),
                                        ("mlp.gate_proj", "ffn_gate", block.mlp.gate_proj),
                                        ("mlp.up_proj", "ffn_up", block.mlp.up_proj),
                                        ("mlp.down_proj", "ffn_down", block.mlp.down_proj)):
            kind = KINDS.get(f"blk.{i}.{gguf_part}", "Q5_0")
            seen.add(kind)
            assert module.bits == PLANS[kind].bits, (i, part)
            assert module.scales.dtype == mx.float32  # the CPU computes in float32
            got, want = layer_values(module), held[f"model.layers.{i}.{part}.weight"]
            if PLANS[kind].how == "repack":
                assert np.array_equal(got, want), (i, part, kind)
            else:
                err = np.linalg.norm(got - want) / np.linalg.norm(want)
                assert 0 < err <= REQUANT_ERROR[kind], (i, part, kind)
    embed = model.model.embed_tokens
    assert embed.bits == 8 and np.array_equal(layer_values(embed),
                                              held["model.embed_tokens.weight"])
    assert seen == {"Q5_0", "Q8_0", "Q4_K", "Q6_K"}
