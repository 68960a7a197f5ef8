"""Mixture-of-experts GGUFs (qwen3moe, qwen2moe): expert stacks into mlx-lm's switch
layers, answering token for token like mlx-lm's own model on the file's values."""

from __future__ import annotations

import importlib
import json

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.models import ModelError, import_gguf, load_model
from mlxchat.models.report import import_report

from tests.models.gguf_files import MLX_MODULE, random_params, write_model
from tests.models.test_gguf_arch import BASE, metadata
from tests.models.test_gguf_import import IDS, rel_error

MOE = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64}
CONFIGS = {
    "qwen3moe": {**BASE, **MOE, "model_type": "qwen3_moe", "head_dim": 32,
                 "rope_theta": 1000000.0, "decoder_sparse_step": 1, "mlp_only_layers": [],
                 "norm_topk_prob": True},
    "qwen2moe": {**BASE, **MOE, "model_type": "qwen2_moe", "rope_theta": 1000000.0,
                 "shared_expert_intermediate_size": 96},
}


def moe_metadata(arch: str, config: dict) -> dict:
    extra = {f"{arch}.expert_count": 8, f"{arch}.expert_used_count": 2,
             f"{arch}.expert_feed_forward_length": 64}
    if arch == "qwen2moe":
        extra[f"{arch}.expert_shared_feed_forward_length"] = 96
    return metadata(arch, config, **extra)


def reference_model(arch: str, config: dict, held: dict[str, np.ndarray]):
    module = importlib.import_module(f"mlx_lm.models.{MLX_MODULE[arch]}")
    model = module.Model(module.ModelArgs.from_dict(config))
    model.load_weights([(k, mx.array(v)) for k, v in held.items()])
    return model


def greedy(model, prompt: list[int], n: int = 12) -> list[int]:
    cache, out, feed = make_prompt_cache(model), [], prompt
    for _ in range(n):
        token = int(mx.argmax(model(mx.array([feed]), cache=cache)[0, -1]).item())
        out.append(token)
        feed = [token]
    return out


@pytest.mark.parametrize("arch, experts", [("qwen3moe", "Q4_0"), ("qwen2moe", "Q4_0"),
                                           ("qwen3moe", "MXFP4")])
def test_moe_imports_token_identically(tmp_path, arch, experts):
    config = CONFIGS[arch]
    path = tmp_path / f"{arch}.gguf"
    kinds = {f"blk.{i}.ffn_{p}_exps": experts for i in range(2) for p in ("gate", "up", "down")}
    held = write_model(path, arch, random_params(arch, config, seed=11), config,
                       moe_metadata(arch, config), kind="Q8_0", kinds=kinds)
    loaded = load_model(str(path))
    mlp = loaded.model.model.layers[1].mlp
    assert type(mlp.switch_mlp.gate_proj).__name__ == "QuantizedSwitchLinear"
    assert (mlp.switch_mlp.gate_proj.bits, mlp.switch_mlp.down_proj.weight.shape[0]) == (4, 8)
    assert mlp.switch_mlp.up_proj.mode == ("mxfp4" if experts == "MXFP4" else "affine")
    ref = reference_model(arch, config, held)
    ids = mx.array(IDS)[None]
    assert rel_error(loaded.model(ids), ref(ids)) < 1e-4
    assert greedy(loaded.model, IDS) == greedy(ref, IDS)

    experts = sum(v.size for k, v in held.items() if "switch_mlp" in k)
    total = sum(v.size for v in held.values())
    report = json.loads((import_gguf(path) / "mlxchat-import.json").read_text())
    assert report["parameters"] == {"total": total, "active": total - experts + experts // 4}
    assert (loaded.info.parameter_count, loaded.info.active_parameter_count) == \
        (total, total - experts + experts // 4)
    assert f"{total:,} total" in import_report(import_gguf(path))


def test_moe_of_another_architecture_is_refused_in_one_line(tmp_path):
    config = {**BASE, "model_type": "qwen2", "rope_theta": 1000000.0}
    path = tmp_path / "moe-llama.gguf"
    write_model(path, "qwen2", random_params("qwen2", config), config,
                metadata("qwen2", config, **{"qwen2.expert_count": 8}))
    with pytest.raises(ModelError, match=r"mixture-of-experts qwen2 GGUF is not supported "
                                         r"\(only qwen2moe, qwen3moe, gpt-oss\)"):
        load_model(str(path))
