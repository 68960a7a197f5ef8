"""Mixture-of-experts import figures for bench/model.py.

import_ppl_ratio_qwen3moe: perplexity of a tiny qwen3moe written by the tests'
GGUF writer as a Q4_K_M-like mix (Q4_K, Q6_K expert downs, embedding and head),
imported and run as the loader runs it here / the file's values decoded to
float32 (``gguf.quants.dequantize``) run in float32 by mlx-lm's own qwen3_moe.
_qwen3moe_q4_k: the same model all Q4_K (exact repacks only), which tells the
Q6_K requantization's share apart. import_ppl_ratio_gptoss: a tiny gpt-oss with
MXFP4 experts and F16 elsewhere. The head is made confident and the text sampled
from the reference, so a small loss shows (as tests/models/loud_gemma.py does).
"""

from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QWEN3MOE = {"model_type": "qwen3_moe", "hidden_size": 256, "num_hidden_layers": 4,
            "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 64, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 256,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
            "max_position_embeddings": 2048, "tie_word_embeddings": False}
GPTOSS = {"model_type": "gpt_oss", "hidden_size": 256, "num_hidden_layers": 4,
          "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 64, "rms_norm_eps": 1e-5, "rope_theta": 150000.0,
          "num_local_experts": 16, "num_experts_per_tok": 4, "sliding_window": 32,
          "layer_types": ["sliding_attention", "full_attention"] * 2,
          "rope_scaling": {"rope_type": "yarn", "factor": 32.0,
                           "original_max_position_embeddings": 4096},
          "max_position_embeddings": 131072, "tie_word_embeddings": False}


def _metadata(arch: str, config: dict) -> dict:
    from tests.models.gguf_writer import model_metadata
    from tests.models.test_gguf_import import MERGES, TOKEN_TYPES, TOKENS

    meta = model_metadata(arch, config, TOKENS, MERGES, TOKEN_TYPES, pre="default")
    experts = config.get("num_experts") or config["num_local_experts"]
    meta.update({f"{arch}.attention.key_length": config["head_dim"],
                 f"{arch}.expert_count": experts,
                 f"{arch}.expert_used_count": config["num_experts_per_tok"],
                 f"{arch}.expert_feed_forward_length":
                     config.get("moe_intermediate_size", config["intermediate_size"])})
    if arch == "gpt-oss":
        meta.update({"gpt-oss.attention.sliding_window": config["sliding_window"],
                     "gpt-oss.rope.scaling.type": "yarn", "gpt-oss.rope.scaling.factor": 32.0,
                     "gpt-oss.rope.scaling.original_context_length": 4096})
    return meta


def _write(path: Path, arch: str, config: dict, mix: str) -> dict:
    """The tiny model as a GGUF of ``mix``; returns the float32 values the file holds."""
    from tests.models.gguf_files import random_params, write_model
    from tests.models.test_gguf_import import TOKENS

    config["vocab_size"] = len(TOKENS)
    params = random_params(arch, config, seed=7)
    params["lm_head.weight"] = params["lm_head.weight"] * 30  # a confident head
    layers = range(config["num_hidden_layers"])
    if arch == "gpt-oss":
        kind, kinds = "F16", {f"blk.{i}.ffn_{p}_exps": "MXFP4" for i in layers
                              for p in ("gate", "up", "down")}
    elif mix == "Q4_K/Q6_K":  # Q4_K_M-like: Q6_K expert downs, embedding and head
        kind = "Q4_K"
        kinds = {"token_embd": "Q6_K", "output": "Q6_K",
                 **{f"blk.{i}.ffn_down_exps": "Q6_K" for i in layers}}
    else:
        kind, kinds = mix, {}
    return write_model(path, arch, params, config, _metadata(arch, config), kind=kind,
                       kinds=kinds)


def _ratio(work: Path, arch: str, config: dict, mix: str) -> float:
    import mlx.core as mx

    from mlxchat.models import load_folder
    from mlxchat.models.gguf.importer import convert_gguf

    from tests.models.gguf_files import MLX_MODULE
    from tests.models.loud_gemma import perplexity, sampled_ids

    name = f"{arch}-{mix.replace('/', '-')}"
    held = _write(work / f"{name}.gguf", arch, config, mix)
    convert_gguf(work / f"{name}.gguf", work / name)
    module = importlib.import_module(f"mlx_lm.models.{MLX_MODULE[arch]}")
    reference = module.Model(module.ModelArgs.from_dict(config))
    reference.load_weights([(k, mx.array(v)) for k, v in held.items()])
    ids = sampled_ids(reference)
    ours = load_folder(work / name, available=None)
    ppl, ref = perplexity(ours.model, ids), perplexity(reference, ids)
    print(f"tiny {arch} {mix}: computes in {ours.info.compute_dtype}, perplexity {ppl:.4f}, "
          f"float32 reference {ref:.4f}")
    return ppl / ref


def moe_figures() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="mlxchat-bench-moe-") as tmp:
        work = Path(tmp)
        return {
            "import_ppl_ratio_qwen3moe": _ratio(work, "qwen3moe", dict(QWEN3MOE), "Q4_K/Q6_K"),
            "import_ppl_ratio_qwen3moe_q4_k": _ratio(work, "qwen3moe", dict(QWEN3MOE), "Q4_K"),
            "import_ppl_ratio_gptoss": _ratio(work, "gpt-oss", dict(GPTOSS), "MXFP4/F16")}


if __name__ == "__main__":
    print(" ".join(f"{k}={v:.3f}" for k, v in moe_figures().items()))
