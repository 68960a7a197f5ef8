"""Tiny random models of each family, built through mlx-lm from a config and
written as real MLX folders (config, weights, tokenizer with the family's
control tokens and a template from ``templates``). Each loads in milliseconds.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from mlxchat.models.testing.text import _byte_chars
from mlxchat.models.tokenizer import write_bpe_tokenizer

from . import templates

_BASE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "rms_norm_eps": 1e-5,
         "max_position_embeddings": 4096, "tie_word_embeddings": False}


@dataclass(frozen=True)
class Family:
    name: str
    model_type: str
    specials: tuple[str, ...]
    bos: str | None
    eos: tuple[str, ...]
    template: str
    config: dict
    system: str | None = "You are terse."
    window: int | None = None
    """Sliding window of the model, when it has one (the test wraps it)."""


FAMILIES = (
    Family("llama3", "llama", ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                               "<|end_header_id|>", "<|eot_id|>"),
           "<|begin_of_text|>", ("<|eot_id|>", "<|end_of_text|>"), templates.LLAMA3,
           {"rope_theta": 500000.0}),
    Family("mistral", "llama", ("<unk>", "<s>", "</s>", "[INST]", "[/INST]"), "<s>", ("</s>",),
           templates.MISTRAL, {"rope_theta": 1e6}),
    Family("qwen3", "qwen3", ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
                              "</think>"), None, ("<|im_end|>", "<|endoftext|>"), templates.QWEN3,
           {"rope_theta": 1e6, "head_dim": 16, "tie_word_embeddings": True}),
    Family("qwen3_moe-r1", "qwen3_moe", ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
                                         "</think>"), None, ("<|im_end|>",), templates.R1_DISTILL,
           {"rope_theta": 1e6, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "moe_intermediate_size": 32,
            "norm_topk_prob": True}),
    Family("qwen3_next", "qwen3_next", ("<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                        "<think>", "</think>"), None, ("<|im_end|>",),
           templates.QWEN3,
           {"rope_theta": 1e6, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32, "norm_topk_prob": True,
            "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
            "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
            "partial_rotary_factor": 0.25, "full_attention_interval": 2}),
    Family("gemma3", "gemma3_text", ("<pad>", "<eos>", "<bos>", "<start_of_turn>",
                                     "<end_of_turn>"), "<bos>", ("<end_of_turn>", "<eos>"),
           templates.GEMMA3,
           {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 24,
            "sliding_window_pattern": 2, "rope_theta": 1e6, "num_key_value_heads": 1},
           window=24),
    Family("gpt_oss", "gpt_oss", ("<|endoftext|>", "<|start|>", "<|end|>", "<|message|>",
                                  "<|channel|>", "<|return|>", "<|call|>"), None,
           ("<|return|>", "<|call|>"), templates.GPT_OSS,
           {"head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
            "sliding_window": 24, "intermediate_size": 64, "rope_theta": 150000,
            "layer_types": ["sliding_attention", "full_attention"]},
           window=24),
)


def with_template(base: str, template: str, **changes) -> Family:
    """The family named ``base`` (its architecture and control tokens)
    rendering ``template``; ``changes`` replace other fields (name, specials)."""
    family = next(f for f in FAMILIES if f.name == base)
    return dataclasses.replace(family, template=template, **changes)


def write_family_model(family: Family, folder: Path, *, seed: int = 0) -> Path:
    """A random ``family.model_type`` model with a byte-level vocabulary."""
    tokens = list(family.specials) + _byte_chars()
    config = {**_BASE, **family.config, "model_type": family.model_type,
              "vocab_size": len(tokens),
              "eos_token_id": [tokens.index(t) for t in family.eos]}
    if family.bos:
        config["bos_token_id"] = tokens.index(family.bos)
    module = importlib.import_module(f"mlx_lm.models.{family.model_type}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / "model.safetensors"),
                        dict(tree_flatten(model.parameters())), {"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    write_bpe_tokenizer(folder, tokens=tokens, merges=[],
                        special_ids=list(range(len(family.specials))),
                        bos_id=tokens.index(family.bos) if family.bos else None,
                        eos_id=tokens.index(family.eos[0]), chat_template=family.template,
                        unk_id=0)
    return folder


def quantized_family_model(family: Family, *, mode: str = "affine", bits: int = 4,
                           group_size: int = 32, vocab_size: int = 96, seed: int = 3):
    """A random ``family.model_type`` model in memory, its layers quantized
    (``bits``, ``group_size``, ``mode``) where their width allows."""
    config = {**_BASE, **family.config, "model_type": family.model_type,
              "vocab_size": vocab_size}
    module = importlib.import_module(f"mlx_lm.models.{family.model_type}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    kwargs = {"mode": mode} if mode != "affine" else {}
    nn.quantize(model, group_size=group_size, bits=bits,
                class_predicate=lambda _, m: hasattr(m, "to_quantized")
                and getattr(m, "weight", mx.zeros((1, 1))).shape[-1] % group_size == 0,
                **kwargs)
    mx.eval(model.parameters())
    return model
