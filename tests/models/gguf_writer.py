"""A test-only GGUF writer (numpy): tiny llamas in F32, F16, Q4_0, Q4_1 and Q8_0.

Block encodings follow ggml's reference quantizers (quantize_row_q4_0_ref
etc.), and q/k rows are permuted the way llama.cpp's converter does, so the
importer sees what a real llama.cpp file holds.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

TYPE_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "BF16": 30, "Q4_K": 12, "IQ2_XXS": 16}
Q4_0 = np.dtype([("d", "<f2"), ("qs", "u1", 16)])
Q4_1 = np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", 16)])
Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", 32)])


def llama_cpp_permute(w: np.ndarray, n_head: int, inverse: bool = False) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: interleave the rotary halves
    (``inverse``: put them back)."""
    half = w.shape[0] // n_head // 2
    split = (n_head, half, 2) if inverse else (n_head, 2, half)
    return w.reshape(*split, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    # ggml: byte j holds element j (low nibble) and element j + 16 (high nibble)
    return (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)


def encode(x: np.ndarray, kind: str) -> tuple[bytes, np.ndarray]:
    """(bytes in the file, the float32 values a reader decodes from them)."""
    x = np.asarray(x, np.float32)
    if kind == "F32":
        return x.tobytes(), x
    if kind == "F16":
        h = x.astype("<f2")
        return h.tobytes(), h.astype(np.float32)
    if kind == "BF16":
        bits = (x.view(np.uint32) >> 16).astype("<u2")
        return bits.tobytes(), (bits.astype(np.uint32) << 16).view(np.float32)
    blocks = x.reshape(-1, 32)
    if kind == "Q4_0":
        idx = np.abs(blocks).argmax(axis=1)
        d = blocks[np.arange(len(blocks)), idx] / -8
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
        q = np.minimum(15, np.floor(blocks * inv[:, None] + 8.5)).astype(np.uint8)
        out = np.zeros(len(blocks), Q4_0)
        out["d"], out["qs"] = d, _pack_nibbles(q)
        dec = (q.astype(np.float32) - 8) * out["d"].astype(np.float32)[:, None]
    elif kind == "Q4_1":
        lo, hi = blocks.min(axis=1), blocks.max(axis=1)
        d = (hi - lo) / 15
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
        q = np.clip(np.floor((blocks - lo[:, None]) * inv[:, None] + 0.5), 0, 15).astype(np.uint8)
        out = np.zeros(len(blocks), Q4_1)
        out["d"], out["m"], out["qs"] = d, lo, _pack_nibbles(q)
        dec = (q.astype(np.float32) * out["d"].astype(np.float32)[:, None]
               + out["m"].astype(np.float32)[:, None])
    elif kind == "Q8_0":
        d = np.abs(blocks).max(axis=1) / 127
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
        q = np.round(blocks * inv[:, None]).astype(np.int8)
        out = np.zeros(len(blocks), Q8_0)
        out["d"], out["qs"] = d, q
        dec = q.astype(np.float32) * out["d"].astype(np.float32)[:, None]
    else:
        raise ValueError(kind)
    return out.tobytes(), dec.reshape(x.shape)


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(v: Any) -> tuple[int, bytes]:
    if isinstance(v, bool):
        return 7, struct.pack("<?", v)
    if isinstance(v, int):
        return (4, struct.pack("<I", v)) if v >= 0 else (5, struct.pack("<i", v))
    if isinstance(v, float):
        return 6, struct.pack("<f", v)
    if isinstance(v, str):
        return 8, _string(v)
    if isinstance(v, (list, tuple)):
        if all(isinstance(i, str) for i in v):
            item_type, raw = 8, b"".join(_string(i) for i in v)
        else:
            item_type, raw = 5, struct.pack(f"<{len(v)}i", *v)
        return 9, struct.pack("<IQ", item_type, len(v)) + raw
    raise TypeError(type(v))


def write_gguf(path: Path, metadata: dict[str, Any], tensors: list[tuple[str, np.ndarray, str]],
               *, alignment: int = 32, version: int = 3) -> dict[str, np.ndarray]:
    """Write a GGUF file; returns each tensor as a reader should decode it."""
    data, infos, decoded = bytearray(), bytearray(), {}
    for name, array, kind in tensors:
        if kind == "IQ2_XXS":  # only the header matters: the importer must refuse it
            raw, dec = b"\0" * (array.size // 256 * 66), array
        else:
            raw, dec = encode(array, kind)
        data += b"\0" * (-len(data) % alignment)
        infos += _string(name) + struct.pack("<I", array.ndim)
        infos += struct.pack(f"<{array.ndim}Q", *reversed(array.shape))
        infos += struct.pack("<IQ", TYPE_IDS[kind], len(data))
        data += raw
        decoded[name] = dec
    meta = bytearray()
    for key, value in metadata.items():
        vtype, raw = _value(value)
        meta += _string(key) + struct.pack("<I", vtype) + raw
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata)) + meta + infos
    head += b"\0" * (-len(head) % alignment)
    Path(path).write_bytes(head + bytes(data))
    return decoded


def tiny_llama_gguf(path: Path, params: dict[str, np.ndarray], config: dict, tokens: list[str],
                    merges: list[str], token_types: list[int], *, kind: str,
                    permute: bool = True, arch: str = "llama",
                    overrides: dict[str, str] | None = None,
                    extra_metadata: dict | None = None) -> dict[str, np.ndarray]:
    """Write mlx-lm llama ``params`` (HF names, float32) as a llama.cpp-style GGUF.

    ``overrides`` maps a GGUF tensor base name (``token_embd``) to its own type.
    """
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    names = {"model.embed_tokens": "token_embd", "model.norm": "output_norm",
             "lm_head": "output"}
    layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
             "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    tensors = []
    for hf_name, w in params.items():
        base = hf_name.removesuffix(".weight")
        if base in names:
            gname = names[base]
        else:
            _, _, n, rest = base.split(".", 3)
            gname = f"blk.{n}.{layer[rest]}"
        if permute and gname.endswith(".attn_q"):
            w = llama_cpp_permute(w, heads)
        elif permute and gname.endswith(".attn_k"):
            w = llama_cpp_permute(w, kv_heads)
        # ggml keeps 1-D tensors (norms) in F32 whatever the file type
        own = (overrides or {}).get(gname, kind)
        tensors.append((f"{gname}.weight", w, "F32" if w.ndim == 1 else own))
    metadata = {
        "general.architecture": arch, "general.name": "tiny test llama",
        "general.alignment": 32,
        **model_metadata(arch, config, tokens, merges, token_types, pre="smollm"),
        "tokenizer.ggml.add_bos_token": False,
        **(extra_metadata or {}),
    }
    return write_gguf(path, metadata, tensors)


def model_metadata(arch: str, config: dict, tokens: list[str], merges: list[str],
                   token_types: list[int], *, pre: str) -> dict[str, Any]:
    """The GGUF keys llama.cpp writes for a model's shape and its BPE vocabulary."""
    return {
        f"{arch}.context_length": config["max_position_embeddings"],
        f"{arch}.embedding_length": config["hidden_size"],
        f"{arch}.block_count": config["num_hidden_layers"],
        f"{arch}.feed_forward_length": config["intermediate_size"],
        f"{arch}.attention.head_count": config["num_attention_heads"],
        f"{arch}.attention.head_count_kv": config["num_key_value_heads"],
        f"{arch}.rope.freq_base": float(config["rope_theta"]),
        f"{arch}.attention.layer_norm_rms_epsilon": float(config["rms_norm_eps"]),
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": token_types,
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
    }
