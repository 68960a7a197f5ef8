"""Architectures: tiny random models of each family, written as llama.cpp would write
them, imported, and compared logit by logit with mlx-lm's own model on the values
the file holds."""

from __future__ import annotations

import importlib
import json

import mlx.core as mx
import numpy as np
import pytest

from mlxchat.models import ModelError, import_gguf, load_model

from tests.models.gguf_files import MLX_MODULE, random_params, write_model
from tests.models.gguf_writer import model_metadata
from tests.models.test_gguf_import import IDS, MERGES, TOKEN_TYPES, TOKENS, rel_error

BASE = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
        "vocab_size": len(TOKENS), "max_position_embeddings": 2048, "tie_word_embeddings": False}
CONFIGS = {
    "qwen2": {**BASE, "model_type": "qwen2", "rope_theta": 1000000.0},
    "qwen3": {**BASE, "model_type": "qwen3", "rope_theta": 1000000.0, "head_dim": 32},
    "gemma2": {**BASE, "model_type": "gemma2", "head_dim": 32, "rope_theta": 10000.0,
               "query_pre_attn_scalar": 32, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0},
    "gemma3": {**BASE, "model_type": "gemma3_text", "num_hidden_layers": 6, "head_dim": 32,
               "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
               "query_pre_attn_scalar": 32, "sliding_window": 8, "sliding_window_pattern": 6,
               "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
}


def metadata(arch: str, config: dict, **extra) -> dict:
    meta = model_metadata(arch, config, TOKENS, MERGES, TOKEN_TYPES, pre="default")
    heads = config["num_attention_heads"]
    meta[f"{arch}.attention.key_length"] = config.get("head_dim", config["hidden_size"] // heads)
    meta.update(extra)
    return meta


def reference_logits(arch: str, config: dict, held: dict[str, np.ndarray]) -> mx.array:
    module = importlib.import_module(f"mlx_lm.models.{MLX_MODULE[arch]}")
    model = module.Model(module.ModelArgs.from_dict(config))
    weights = {k: mx.array(v) for k, v in held.items()}
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)
    model.load_weights(list(weights.items()))
    return model(mx.array(IDS)[None])


def extra_metadata(arch: str, config: dict) -> dict:
    if arch == "gemma2":
        return {"gemma2.attn_logit_softcapping": 50.0, "gemma2.final_logit_softcapping": 30.0,
                "gemma2.attention.sliding_window": 4096}
    if arch == "gemma3":
        return {"gemma3.attention.sliding_window": 8, "gemma3.rope.scaling.type": "linear",
                "gemma3.rope.scaling.factor": 8.0}
    return {}


@pytest.mark.parametrize("arch", list(CONFIGS))
def test_architecture_imports_exactly(tmp_path, arch):
    config = CONFIGS[arch]
    params = random_params(arch, config, seed=5)
    vision = {}
    if arch.startswith("gemma"):
        params.pop("lm_head.weight", None)  # Gemma ties its embeddings
        # Ollama's gemma3 blobs carry the vision tower in the same file
        vision = {"v.blk.0.attn_q.weight": np.ones((8, 32)), "mm.input_projection.weight":
                  np.ones((8, 32))} if arch == "gemma3" else {}
    path = tmp_path / f"{arch}.gguf"
    held = write_model(path, arch, params, config,
                       metadata(arch, config, **extra_metadata(arch, config)),
                       extra_tensors=vision)
    loaded = load_model(str(path))
    assert loaded.info.architecture == config["model_type"]
    notes = json.loads((import_gguf(path) / "mlxchat-import.json").read_text())["notes"]
    skipped = [n for n in notes if "vision" in n]
    assert skipped == (["2 vision tensors skipped: imported as a text-only model"] if vision
                       else [])
    expected = reference_logits(arch, config, held)
    assert rel_error(loaded.model(mx.array(IDS)[None]), expected) < 1e-4
    if arch.startswith("gemma"):  # the 1 + w norms really were undone
        plain = dict(held)
        for k in plain:
            if k.endswith("norm.weight"):
                plain[k] = plain[k] + 1
        assert rel_error(loaded.model(mx.array(IDS)[None]),
                         reference_logits(arch, config, plain)) > 1e-2


def llama_cpp_rope_factors(dims: int, base: float, factor: float, low: float, high: float,
                           old: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors, written out again."""
    out = []
    for i in range(0, dims, 2):
        wavelen = 2 * np.pi * base ** (i / dims)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


@pytest.mark.parametrize("low, high, old", [(1.0, 4.0, 8192), (2.0, 16.0, 4096)])
def test_llama3_rope_scaling_from_rope_freqs(tmp_path, low, high, old):
    config = {**BASE, "model_type": "llama", "hidden_size": 128, "num_attention_heads": 2,
              "num_key_value_heads": 1, "rope_theta": 500000.0,
              "max_position_embeddings": 131072,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": low,
                               "high_freq_factor": high,
                               "original_max_position_embeddings": old}}
    params = random_params("llama", config, seed=9)
    path = tmp_path / "llama3.gguf"
    freqs = llama_cpp_rope_factors(64, 500000.0, 8.0, low, high, old)
    assert ((freqs > 1) & (freqs < 8)).sum() >= 2  # a transition band to fit
    held = write_model(path, "llama", params, config,
                       metadata("llama", config, **{"tokenizer.ggml.pre": "llama-bpe"}),
                       extra_tensors={"rope_freqs.weight": freqs})
    folder = import_gguf(path)
    scaling = json.loads((folder / "config.json").read_text())["rope_scaling"]
    assert scaling["rope_type"] == "llama3" and scaling["factor"] == 8.0
    # Only the band's wavelengths are fixed by the file (old/low, old/high), not the three.
    band = [scaling["original_max_position_embeddings"] / scaling[k]
            for k in ("low_freq_factor", "high_freq_factor")]
    assert band == pytest.approx([old / low, old / high])
    loaded = load_model(str(path))
    ids = mx.array(IDS)[None]
    cache = loaded.model.make_cache() if hasattr(loaded.model, "make_cache") else None
    expected = reference_logits("llama", config, held)
    assert rel_error(loaded.model(ids, cache=cache), expected) < 1e-4
    unscaled = {k: v for k, v in config.items() if k != "rope_scaling"}
    assert rel_error(expected, reference_logits("llama", unscaled, held)) > 1e-3


def test_unknown_rope_freqs_are_refused(tmp_path):
    config = {**BASE, "model_type": "llama", "rope_theta": 10000.0}
    params = random_params("llama", config, seed=1)
    path = tmp_path / "odd.gguf"
    odd = np.linspace(1, 3, 8).astype(np.float32)[::-1].copy()  # no Llama 3 shape
    write_model(path, "llama", params, config, metadata("llama", config),
                extra_tensors={"rope_freqs.weight": odd})
    with pytest.raises(ModelError) as info:
        load_model(str(path))
    assert "rope_freqs" in str(info.value) and "not Llama 3 rope scaling" in str(info.value)


def test_embedding_rows_past_the_vocabulary(tmp_path):
    """Some files pad the embedding past the token list: the weights decide vocab_size."""
    config = {**CONFIGS["qwen2"], "vocab_size": len(TOKENS) + 13}
    params = random_params("qwen2", config, seed=6)
    path = tmp_path / "padded.gguf"
    held = write_model(path, "qwen2", params, config, metadata("qwen2", config))
    loaded = load_model(str(path))
    logits = loaded.model(mx.array(IDS)[None])
    assert logits.shape[-1] == len(TOKENS) + 13
    assert rel_error(logits, reference_logits("qwen2", config, held)) < 1e-4
