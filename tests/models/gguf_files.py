"""Test-only: tiny models of each architecture written with ``gguf``'s own writer.

Parameters come from a random mlx-lm model (HF names and row order); they are
renamed and transformed the way llama.cpp's convert_hf_to_gguf.py does (q/k
row permutation for llama, ``1 + w`` norms for Gemma), encoded to each tensor's
type (K-quant blocks by hand, see kquants.py) and written by ``GGUFWriter``.
``gguf.quants.dequantize`` then gives what the file holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from tests.models.gguf_writer import llama_cpp_permute
from tests.models.kquants import encode_blocks

LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
         "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
         "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
         "mlp.gate": "ffn_gate_inp", "mlp.switch_mlp.gate_proj": "ffn_gate_exps",
         "mlp.switch_mlp.up_proj": "ffn_up_exps", "mlp.switch_mlp.down_proj": "ffn_down_exps",
         "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
         "mlp.shared_expert.up_proj": "ffn_up_shexp",
         "mlp.shared_expert.down_proj": "ffn_down_shexp",
         "mlp.shared_expert_gate": "ffn_gate_inp_shexp"}
GEMMA_LAYER = {**LAYER, "pre_feedforward_layernorm": "ffn_norm",
               "post_attention_layernorm": "post_attention_norm",
               "post_feedforward_layernorm": "post_ffw_norm"}
GPT_OSS_LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
                 "mlp.router": "ffn_gate_inp", "mlp.experts.gate_proj": "ffn_gate_exps",
                 "mlp.experts.up_proj": "ffn_up_exps", "mlp.experts.down_proj": "ffn_down_exps"}
"""convert_hf_to_gguf.py's GptOssModel (after splitting HF's interleaved gate_up_proj)."""
TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
MLX_MODULE = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
              "gemma3": "gemma3_text", "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe",
              "gpt-oss": "gpt_oss"}


def random_params(arch: str, config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Float32 parameters of a random mlx-lm model of ``arch`` (HF names and order)."""
    import importlib

    module = importlib.import_module(f"mlx_lm.models.{MLX_MODULE[arch]}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    params = {k: np.array(v, np.float32) for k, v in tree_flatten(model.parameters())}
    rng = np.random.default_rng(seed)
    for k, v in params.items():
        if k.endswith("norm.weight"):  # not all ones: a norm mix-up must show
            params[k] = (1 + 0.2 * rng.standard_normal(v.shape)).astype(np.float32)
            if arch.startswith("gemma"):
                params[k] -= 1  # Gemma norms hold w for a scale of 1 + w
        elif "q_proj.weight" in k or "k_proj.weight" in k:
            params[k] = v * 4  # sharper attention: the rotary pairs matter
        elif not v.any():  # gpt-oss's sinks and expert biases start at zero
            params[k] = (0.5 * rng.standard_normal(v.shape)).astype(np.float32)
    return params


def gguf_name(arch: str, hf_name: str) -> str:
    if hf_name.endswith("self_attn.sinks"):  # gpt-oss: llama.cpp adds the ".weight"
        return f"blk.{hf_name.split('.')[2]}.attn_sinks.weight"
    base, _, part = hf_name.rpartition(".")
    if base in TOP:
        return f"{TOP[base]}.{part}"
    _, _, n, rest = base.split(".", 3)
    layer = (GEMMA_LAYER if arch.startswith("gemma") else GPT_OSS_LAYER if arch == "gpt-oss"
             else LAYER)
    return f"blk.{n}.{layer[rest]}.{part}"


def encode(values: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(what GGUFWriter gets, the float32 values the file then holds)."""
    if kind == "F32":
        return values.astype(np.float32), values.astype(np.float32)
    if kind == "F16":
        return values.astype(np.float16), values.astype(np.float16).astype(np.float32)
    qtype = gguf.GGMLQuantizationType[kind]
    rows = values.reshape(-1, values.shape[-1])
    if kind in ("Q4_0", "Q4_1", "Q8_0", "BF16", "MXFP4"):
        raw = gguf.quants.quantize(rows, qtype)
    else:
        raw = encode_blocks(rows, kind)
    return raw, gguf.quants.dequantize(raw, qtype).reshape(values.shape).astype(np.float32)


def add_metadata(w: gguf.GGUFWriter, metadata: dict[str, Any]) -> None:
    for key, v in metadata.items():
        if isinstance(v, bool):
            w.add_bool(key, v)
        elif isinstance(v, int):
            w.add_uint32(key, v)
        elif isinstance(v, float):
            w.add_float32(key, v)
        elif isinstance(v, str):
            w.add_string(key, v)
        else:
            w.add_array(key, list(v))


def write_model(path: Path, arch: str, params: dict[str, np.ndarray], config: dict,
                metadata: dict[str, Any], *, kind: str = "F32",
                kinds: dict[str, str] | None = None,
                extra_tensors: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Write the GGUF; returns, per HF name, the float32 values the file holds
    (in HF order and convention, so they load straight into the mlx-lm model).

    ``kinds`` maps a GGUF tensor base name ('output', 'blk.0.ffn_down') to its type.
    """
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    w = gguf.GGUFWriter(path, arch)
    add_metadata(w, metadata)
    held = {}
    for hf_name, value in params.items():
        name = gguf_name(arch, hf_name)
        stored = value
        if arch.startswith("gemma") and hf_name.endswith("norm.weight"):
            stored = value + 1  # convert_hf_to_gguf.py's Gemma norm shift
        if arch == "llama" and ".attn_q.weight" in name:
            stored = llama_cpp_permute(value, heads)
        elif arch == "llama" and ".attn_k.weight" in name:
            stored = llama_cpp_permute(value, kv_heads)
        if name.endswith("ffn_gate_inp_shexp.weight"):
            stored = value.reshape(-1)  # llama.cpp keeps the shared expert's gate a vector
        quantizable = stored.ndim >= 2 and not name.endswith(".bias")  # expert biases: F32
        own = (kinds or {}).get(name.rsplit(".", 1)[0], kind) if quantizable else "F32"
        raw, decoded = encode(stored, own)
        if own not in ("F32", "F16"):  # expert stacks: (experts, rows, bytes per row)
            raw = raw.reshape(*stored.shape[:-1], -1)
        decoded = decoded.reshape(value.shape)
        raw_dtype = None if own in ("F32", "F16") else gguf.GGMLQuantizationType[own]
        w.add_tensor(name, raw, raw_dtype=raw_dtype)
        if arch == "llama" and ".attn_q.weight" in name:
            decoded = llama_cpp_permute(decoded, heads, inverse=True)
        elif arch == "llama" and ".attn_k.weight" in name:
            decoded = llama_cpp_permute(decoded, kv_heads, inverse=True)
        if arch.startswith("gemma") and hf_name.endswith("norm.weight"):
            decoded = decoded - 1
        held[hf_name] = decoded
    for name, value in (extra_tensors or {}).items():
        w.add_tensor(name, value.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return held
