"""GGUF architectures -> mlx-lm models: tensor names, row order and config.json.

llama (Mistral and Llama 2/3 GGUFs use it too), qwen2, qwen3, gemma2,
gemma3 (text), and the mixtures of experts qwen2moe, qwen3moe and gpt-oss.
What llama.cpp's converter changed is undone here: it interleaves the rotary
halves of llama's q/k rows, stores Gemma's norms as ``1 + w``, and turns Llama
3's rope scaling into a ``rope_freqs`` tensor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from mlxchat.models import precision
from mlxchat.models.errors import ModelError
from mlxchat.models.gguf.header import GGUFHeader

_LAYER = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
}
_GEMMA_LAYER = {**_LAYER, "ffn_norm": "pre_feedforward_layernorm",
                "post_attention_norm": "post_attention_layernorm",
                "post_ffw_norm": "post_feedforward_layernorm"}
_MOE_LAYER = {**_LAYER, "ffn_gate_inp": "mlp.gate",
              "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
              "ffn_up_exps": "mlp.switch_mlp.up_proj",
              "ffn_down_exps": "mlp.switch_mlp.down_proj",
              "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
              "ffn_up_shexp": "mlp.shared_expert.up_proj",
              "ffn_down_shexp": "mlp.shared_expert.down_proj",
              "ffn_gate_inp_shexp": "mlp.shared_expert_gate"}
"""Mixture of experts: the router, the stacked experts (mlx-lm's SwitchGLU takes
them as llama.cpp stores them, (experts, rows, columns)) and a shared expert."""
_GPT_OSS_LAYER = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "attn_sinks": "self_attn.sinks", "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm", "ffn_gate_inp": "mlp.router",
    "ffn_gate_exps": "mlp.experts.gate_proj", "ffn_up_exps": "mlp.experts.up_proj",
    "ffn_down_exps": "mlp.experts.down_proj",
}
"""gpt-oss: biased attention with a learned sink logit per head, a biased router and
biased experts (each ``_exps`` stack has a ``.bias`` of shape (experts, rows))."""
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


@dataclass(frozen=True)
class Arch:
    model_type: str
    layer: dict[str, str] = field(default_factory=lambda: _LAYER)
    permute_qk: bool = False
    """llama.cpp's LlamaModel permutes q/k rows; Qwen and Gemma keep HF order."""
    norm_shift: float = 0.0
    """Gemma: the file holds 1 + w for every norm weight."""
    skip: tuple[str, ...] = ()
    """Tensors consumed into the config, not weights."""
    moe: bool = False
    bare: tuple[str, ...] = ()
    """Layer tensors that are a parameter of their own in mlx-lm, not a module's
    ``weight`` (gpt-oss's ``attn_sinks.weight`` is ``self_attn.sinks``)."""
    required: tuple[str, ...] = ()
    """Metadata this architecture needs beyond REQUIRED (and MOE_REQUIRED)."""
    tensors: tuple[str, ...] = ()
    """Tensors the mlx-lm model cannot do without (gpt-oss has no tied head)."""
    yarn: bool = False
    """YaRN rope scaling is mapped (mlx-lm's qwen3_moe, qwen2_moe and gemma2 would
    ignore or reject it; the dense families are not tested with it here)."""


ARCHS = {
    "llama": Arch("llama", permute_qk=True, skip=("rope_freqs",)),
    "qwen2": Arch("qwen2"),
    "qwen3": Arch("qwen3"),
    "gemma2": Arch("gemma2", layer=_GEMMA_LAYER, norm_shift=1.0),
    "gemma3": Arch("gemma3_text", layer=_GEMMA_LAYER, norm_shift=1.0),
    "qwen2moe": Arch("qwen2_moe", layer=_MOE_LAYER, moe=True),
    "qwen3moe": Arch("qwen3_moe", layer=_MOE_LAYER, moe=True),
    "gpt-oss": Arch("gpt_oss", layer=_GPT_OSS_LAYER, moe=True, bare=("attn_sinks",),
                    required=("attention.sliding_window",), tensors=("output.weight",),
                    yarn=True),
}
REQUIRED = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count")
MOE_REQUIRED = ("expert_count", "expert_used_count", "expert_feed_forward_length")


def arch_of(header: GGUFHeader) -> Arch:
    arch = ARCHS.get(header.architecture)
    if arch is None:
        raise ModelError(f"architecture '{header.architecture}' is not supported (only "
                         f"{', '.join(ARCHS)}): {header.path}")
    return arch


def check_architecture(header: GGUFHeader) -> None:
    """One-line errors for a file whose architecture or metadata we cannot map."""
    arch = arch_of(header)
    experts = int(header.arch_value("expert_count", 0) or 0)
    if experts and not arch.moe:
        raise ModelError(f"a mixture-of-experts {header.architecture} GGUF is not supported "
                         f"(only {', '.join(k for k, a in ARCHS.items() if a.moe)}): "
                         f"{header.path}")
    required = REQUIRED + (MOE_REQUIRED if arch.moe else ()) + arch.required
    missing = [f"{header.architecture}.{k}" for k in required if header.arch_value(k) is None]
    missing += [k for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.eos_token_id")
                if k not in header.metadata]
    if missing:
        raise ModelError(f"{header.path} lacks metadata {', '.join(missing)}: not a complete "
                         f"{header.architecture} GGUF")
    absent = [t for t in arch.tensors if header.tensor(t) is None]
    if absent:
        raise ModelError(f"{header.path} lacks tensor {', '.join(absent)}: not a complete "
                         f"{header.architecture} GGUF")
    for t in header.tensors:
        mlx_name(arch, t.name)  # an unknown tensor fails before any work
    if header.arch_value("rope.scaling.type") not in (None, "none"):
        _rope_scaling(header, 0, 0.0)  # linear and YaRN need neither; others refused


def mlx_name(arch: Arch, gguf_name: str) -> str | None:
    """The mlx-lm parameter path for a GGUF tensor name; None for tensors we skip."""
    base, _, part = gguf_name.rpartition(".")
    if base in arch.skip or is_vision(gguf_name):
        return None
    if base in _TOP and part == "weight":
        return f"{_TOP[base]}.weight"
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)", base)
    if m and m.group(2) in arch.layer and part in ("weight", "bias"):
        path = f"model.layers.{m.group(1)}.{arch.layer[m.group(2)]}"
        return path if m.group(2) in arch.bare else f"{path}.{part}"
    raise ModelError(f"tensor {gguf_name} is not part of a {arch.model_type} model we can "
                     "import")


def is_vision(gguf_name: str) -> bool:
    """Vision tower / projector tensors (Ollama's gemma3 blobs carry them): text only here."""
    return gguf_name.startswith(("v.", "mm."))


def unpermute(a: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's per-head interleave of the two rotary halves (rows only)."""
    half = a.shape[0] // n_head // 2
    return a.reshape(n_head, half, 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)


def row_heads(arch: Arch, header: GGUFHeader, gguf_name: str) -> int | None:
    """Heads whose q/k rows must be put back in HF order, or None."""
    if not arch.permute_qk:
        return None
    heads = int(header.arch_value("attention.head_count"))
    if ".attn_q." in gguf_name:
        return heads
    if ".attn_k." in gguf_name:
        return int(header.arch_value("attention.head_count_kv", heads))
    return None


def _number(x: float) -> float:
    """GGUF stores float32: 9.999999747e-06 back to 1e-05."""
    return float(f"{x:.7g}")


def _llama3_factors(dims: int, base: float, factor: float, low: float, high: float,
                    old: float) -> np.ndarray:
    """convert_hf_to_gguf.py's rope_freqs for Llama 3 scaling (one per rotary pair)."""
    wavelen = 2 * np.pi * base ** (np.arange(0, dims, 2, dtype=np.float64) / dims)
    smooth = (old / wavelen - low) / (high - low)
    mid = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < old / high, 1.0, np.where(wavelen > old / low, factor, mid))


def llama3_scaling(header: GGUFHeader, dims: int, base: float) -> dict | None:
    """mlx-lm's ``rope_scaling`` for a ``rope_freqs`` tensor, checked to reproduce it."""
    t = header.tensor("rope_freqs.weight")
    if t is None:
        return None
    f = np.asarray(t.data, np.float64).reshape(-1)
    factor = float(f.max())
    if factor <= 1.0:
        return None
    old = float(header.arch_value("rope.scaling.original_context_length", 8192) or 8192)
    candidates = [(1.0, 4.0, old)]
    mid = (f > 1 + 1e-6) & (f < factor - 1e-6)
    if mid.sum() >= 2:  # smooth = a / wavelen + b in the transition band
        wavelen = 2 * np.pi * base ** (np.arange(0, dims, 2) / dims)
        smooth = (1 / f[mid] - 1 / factor) / (1 - 1 / factor)
        a, b = np.polyfit(1 / wavelen[mid], smooth, 1)
        low = -b * old / a
        candidates.append((low, low + old / a, old))
    for low, high, old_len in candidates:
        if np.allclose(_llama3_factors(dims, base, factor, low, high, old_len), f,
                       rtol=1e-4, atol=1e-5):
            return {"rope_type": "llama3", "factor": _number(factor),
                    "low_freq_factor": _number(low), "high_freq_factor": _number(high),
                    "original_max_position_embeddings": int(old_len)}
    raise ModelError(f"rope_freqs of {header.path} is not Llama 3 rope scaling; "
                     "cannot import it")


def _scaling_factor(header: GGUFHeader) -> float:
    factor = header.arch_value("rope.scaling.factor")
    if factor is None:
        raise ModelError(f"{header.path} has {header.arch_value('rope.scaling.type')} rope "
                         "scaling without rope.scaling.factor")
    return _number(factor)


_YARN_PLAIN = {"yarn_ext_factor": 1.0, "yarn_attn_factor": 1.0, "yarn_log_multiplier": 0.0}
"""YaRN keys mlx-lm's YarnRoPE has no knob for, at the value it assumes."""


def _yarn_scaling(header: GGUFHeader) -> dict:
    """mlx-lm's ``rope_scaling`` for YaRN (mapped for gpt-oss only; see ``Arch.yarn``)."""
    for key, plain in _YARN_PLAIN.items():
        value = header.arch_value(f"rope.scaling.{key}")
        if value is not None and abs(float(value) - plain) > 1e-6:
            raise ModelError(f"YaRN rope scaling with rope.scaling.{key} = {float(value):g} "
                             f"is not supported (only {plain:g}): {header.path}")
    scaling = {"rope_type": "yarn", "factor": _scaling_factor(header),
               "original_max_position_embeddings":
                   int(header.arch_value("rope.scaling.original_context_length", 4096))}
    for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
        value = header.arch_value(f"rope.scaling.{key}")
        if value is not None:  # absent: mlx-lm's (and llama.cpp's) 32 and 1
            scaling[name] = _number(value)
    return scaling


def _rope_scaling(header: GGUFHeader, dims: int, base: float) -> dict | None:
    kind = header.arch_value("rope.scaling.type")
    if kind == "linear":
        return {"rope_type": "linear", "factor": _scaling_factor(header)}
    if kind == "yarn" and arch_of(header).yarn:
        return _yarn_scaling(header)
    if kind not in (None, "none"):
        raise ModelError(f"rope scaling '{kind}' is not supported: {header.path}")
    return llama3_scaling(header, dims, base)


def _gemma_extras(header: GGUFHeader, c: dict) -> dict:
    # llama.cpp: the 27B models scale queries by hidden/heads, the others by head_dim.
    big = c["num_hidden_layers"] in (46, 62)
    extras = {"query_pre_attn_scalar": (c["hidden_size"] // c["num_attention_heads"]
                                        if big else c["head_dim"])}
    window = header.arch_value("attention.sliding_window")
    if header.architecture == "gemma2":
        extras["attn_logit_softcapping"] = _number(header.arch_value("attn_logit_softcapping", 50.0))
        extras["final_logit_softcapping"] = _number(header.arch_value("final_logit_softcapping", 30.0))
    else:
        extras["rope_local_base_freq"] = _number(header.arch_value("rope.freq_base_swa", 10000.0))
        extras["sliding_window_pattern"] = 6  # llama.cpp's fixed pattern for gemma3
        if window:
            extras["sliding_window"] = int(window)
    return extras


def _gpt_oss_extras(header: GGUFHeader, layers: int) -> dict:
    """mlx-lm's gpt_oss names; llama.cpp fixes its layer pattern (sliding, full, ...;
    set_swa_pattern(2)) and its SwiGLU (limit 7, alpha 1.702, as mlx-lm's SwigluOAI)."""
    return {"num_local_experts": int(header.arch_value("expert_count")),
            "num_experts_per_tok": int(header.arch_value("expert_used_count")),
            "intermediate_size": int(header.arch_value("expert_feed_forward_length")),
            "sliding_window": int(header.arch_value("attention.sliding_window")),
            "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention"
                            for i in range(layers)]}


def _moe_extras(header: GGUFHeader, arch: Arch) -> dict:
    if arch.model_type == "gpt_oss":
        return _gpt_oss_extras(header, int(header.arch_value("block_count")))
    extras = {"num_experts": int(header.arch_value("expert_count")),
              "num_experts_per_tok": int(header.arch_value("expert_used_count")),
              "moe_intermediate_size": int(header.arch_value("expert_feed_forward_length"))}
    if arch.model_type == "qwen3_moe":  # llama.cpp renormalises the top k for qwen3moe
        extras.update(decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True)
    else:
        shared = header.arch_value("expert_shared_feed_forward_length")
        t = header.tensor("blk.0.ffn_up_shexp.weight")
        extras["shared_expert_intermediate_size"] = int(shared or (t.shape[0] if t else 0))
    return extras


def active_parameters(header: GGUFHeader) -> tuple[int, int]:
    """(total, active per token) parameters of the file's tensors: a routed expert
    stack counts k/E toward the active figure, everything else in full."""
    experts = int(header.arch_value("expert_count", 0) or 0)
    used = int(header.arch_value("expert_used_count", 0) or 0)
    total = active = 0
    for t in header.tensors:
        n = int(np.prod(t.shape))
        total += n
        routed = experts and "_exps." in t.name
        active += n * used // experts if routed else n
    return total, active


def build_config(header: GGUFHeader, quantization: dict | None) -> dict:
    """config.json for mlx-lm from the GGUF metadata."""
    arch, m = arch_of(header), header.metadata
    heads = int(header.arch_value("attention.head_count"))
    hidden = int(header.arch_value("embedding_length"))
    head_dim = int(header.arch_value("attention.key_length", hidden // heads))
    base = _number(header.arch_value("rope.freq_base", 10000.0))
    embed = header.tensor("token_embd.weight")  # may have padding rows past the vocabulary
    eos = [int(m["tokenizer.ggml.eos_token_id"])]
    eot = m.get("tokenizer.ggml.eot_token_id")
    if eot is not None and int(eot) not in eos:
        eos.append(int(eot))
    config = {
        "model_type": arch.model_type,
        "hidden_size": hidden,
        "num_hidden_layers": int(header.arch_value("block_count")),
        "intermediate_size": int(header.arch_value("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(header.arch_value("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": _number(header.arch_value("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": base,
        "vocab_size": embed.shape[0] if embed else len(m["tokenizer.ggml.tokens"]),
        "max_position_embeddings": int(header.arch_value("context_length", 4096)),
        "tie_word_embeddings": header.tensor("output.weight") is None,
        "bos_token_id": m.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
    }
    scaling = _rope_scaling(header, head_dim, base)
    if scaling:
        config["rope_scaling"] = scaling
    if arch.norm_shift:
        config.update(_gemma_extras(header, config))
    if arch.moe:
        config.update(_moe_extras(header, arch))
    config["compute_dtype"] = precision.import_record(arch.model_type)
    if quantization:
        config["quantization"] = quantization
        config["quantization_config"] = quantization
    return config
