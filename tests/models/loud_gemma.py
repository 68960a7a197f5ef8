"""Test-only: a tiny Gemma-3-shaped model loud enough to show float16's loss.

Real Gemma checkpoints carry a few "massive activation" channels in the
residual stream (tens of thousands); with the embedding scale sqrt(hidden) and
the residual updates they pass float16's 65504, which is why Gemma is never
run in float16. This model has one such channel (embedding column 0 near
3900, times 16) and a confident untied head, so a perplexity measures it:
float32 finite, bfloat16 within about 1%, float16 overflowing (nan).
"""

from __future__ import annotations

import math
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from tests.models.gguf_files import random_params, write_model
from tests.models.gguf_writer import model_metadata
from tests.models.test_gguf_import import MERGES, TOKEN_TYPES, TOKENS

CONFIG = {"model_type": "gemma3_text", "hidden_size": 256, "num_hidden_layers": 6,
          "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 64, "rms_norm_eps": 1e-6, "vocab_size": len(TOKENS),
          "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
          "query_pre_attn_scalar": 64, "sliding_window": 512, "sliding_window_pattern": 6,
          "max_position_embeddings": 2048, "tie_word_embeddings": False}
FILES = {"Q4_K/Q6_K": ("Q4_K", {"token_embd": "Q6_K", "output": "Q6_K"}),
         "Q5_0/Q8_0": ("Q5_0", {"token_embd": "Q8_0", "output": "Q8_0"})}
"""The two mixes bench/model.py and the tests write (Q4_K_M-like, Q5_0-like)."""
MASSIVE = 3900.0


def loud_params(seed: int = 3) -> dict[str, np.ndarray]:
    params = random_params("gemma3", CONFIG, seed=seed)
    rng = np.random.default_rng(seed)
    for k, v in params.items():
        if "post_" in k and k.endswith("norm.weight"):  # updates as large as Gemma's
            params[k] = (20 * (1 + 0.2 * rng.standard_normal(v.shape)) - 1).astype(np.float32)
        elif k == "lm_head.weight":
            params[k] = v * 30  # a confident head: perplexity reacts to small changes
        elif k == "model.embed_tokens.weight":
            params[k][:, 0] = MASSIVE * (1 + 0.1 * rng.standard_normal(v.shape[0]))
    return params


def write_loud_gemma(path: Path, mix: str) -> dict[str, np.ndarray]:
    """Write the model as a GGUF of ``mix`` (a FILES key); returns the values it holds."""
    kind, kinds = FILES[mix]
    meta = model_metadata("gemma3", CONFIG, TOKENS, MERGES, TOKEN_TYPES, pre="default")
    meta.update({"gemma3.attention.key_length": 64, "gemma3.attention.value_length": 64,
                 "gemma3.attention.sliding_window": 512})
    return write_model(path, "gemma3", loud_params(), CONFIG, meta, kind=kind, kinds=kinds)


def reference(held: dict[str, np.ndarray], dtype: mx.Dtype = mx.float32) -> nn.Module:
    """mlx-lm's Gemma 3 holding the file's decoded values, computing in ``dtype``."""
    from mlx_lm.models import gemma3_text

    model = gemma3_text.Model(gemma3_text.ModelArgs.from_dict(CONFIG))
    model.load_weights([(k, mx.array(v).astype(dtype)) for k, v in held.items()])
    return model


def sampled_ids(model: nn.Module, n: int = 96, seed: int = 2) -> list[int]:
    """A sequence the model itself finds likely (temperature 1): its perplexity is low,
    so a precision loss shows."""
    from mlx_lm.models.cache import make_prompt_cache

    rng, cache, ids = np.random.default_rng(seed), make_prompt_cache(model), [1]
    for _ in range(n):
        logits = model(mx.array([ids[-1:]]), cache=cache)[0, -1].astype(mx.float32)
        p = np.array(mx.softmax(logits), np.float64)
        ids.append(int(rng.choice(len(p), p=p / p.sum())))
    return ids


def perplexity(model: nn.Module, ids: list[int]) -> float:
    tokens = mx.array(ids)[None]
    logits = model(tokens[:, :-1]).astype(mx.float32)
    return math.exp(nn.losses.cross_entropy(logits, tokens[:, 1:]).mean().item())
