"""gpt-oss GGUFs: attention sinks, biased router and experts (MXFP4), alternating
sliding-window layers and YaRN rope scaling, answering token for token like
mlx-lm's own gpt_oss model on the file's values."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest

from mlxchat.models import ModelError, import_gguf, load_model
from mlxchat.models.report import import_report

from tests.models.gguf_files import random_params, write_model
from tests.models.test_gguf_arch import BASE, metadata
from tests.models.test_gguf_import import IDS, rel_error
from tests.models.test_gguf_moe import greedy, reference_model

YARN = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32.0, "beta_slow": 1.0}
CONFIG = {**BASE, "model_type": "gpt_oss", "num_hidden_layers": 4, "intermediate_size": 64,
          "num_local_experts": 8, "num_experts_per_tok": 2, "head_dim": 32,
          "rms_norm_eps": 1e-5, "rope_theta": 150000.0, "sliding_window": 8,
          "max_position_embeddings": 131072,
          "rope_scaling": YARN,
          "layer_types": ["sliding_attention", "full_attention"] * 2}
"""Four layers, a window of 8 (IDS has 24 tokens: the sliding layers must cut)."""
EXPERTS = {f"blk.{i}.ffn_{p}_exps": "MXFP4" for i in range(4) for p in ("gate", "up", "down")}


def gptoss_metadata(**extra) -> dict:
    a = "gpt-oss"
    return metadata(a, CONFIG, **{
        f"{a}.expert_count": 8, f"{a}.expert_used_count": 2,
        f"{a}.expert_feed_forward_length": 64, f"{a}.attention.sliding_window": 8,
        f"{a}.rope.scaling.type": "yarn", f"{a}.rope.scaling.factor": 32.0,
        f"{a}.rope.scaling.original_context_length": 4096,
        f"{a}.rope.scaling.yarn_beta_fast": 32.0, f"{a}.rope.scaling.yarn_beta_slow": 1.0,
        "tokenizer.ggml.pre": "gpt-4o", **extra})


def write_gptoss(path, *, kind: str = "F16", params: dict | None = None, **extra) -> dict:
    params = params if params is not None else random_params("gpt-oss", CONFIG, seed=13)
    return write_model(path, "gpt-oss", params, CONFIG, gptoss_metadata(**extra), kind=kind,
                       kinds=EXPERTS)


@pytest.mark.parametrize("kind", ["F16", "Q8_0"])
def test_gptoss_imports_token_identically(tmp_path, kind):
    path = tmp_path / f"gpt-oss-{kind}.gguf"
    held = write_gptoss(path, kind=kind)
    loaded = load_model(str(path))
    layer = loaded.model.model.layers[1]
    experts = layer.mlp.experts
    assert type(experts.gate_proj).__name__ == "QuantizedSwitchLinear"
    assert (experts.up_proj.mode, experts.down_proj.bits) == ("mxfp4", 4)
    assert mx.array_equal(experts.gate_proj.bias,
                          mx.array(held["model.layers.1.mlp.experts.gate_proj.bias"]))
    assert mx.array_equal(layer.self_attn.sinks, mx.array(held["model.layers.1.self_attn.sinks"]))

    config = json.loads((import_gguf(path) / "config.json").read_text())
    assert {k: config[k] for k in ("rope_scaling", "layer_types", "sliding_window",
                                   "num_local_experts", "num_experts_per_tok",
                                   "intermediate_size", "head_dim")} == \
        {k: CONFIG[k] for k in ("rope_scaling", "layer_types", "sliding_window",
                                "num_local_experts", "num_experts_per_tok",
                                "intermediate_size", "head_dim")}
    ref = reference_model("gpt-oss", CONFIG, held)
    ids = mx.array(IDS)[None]
    assert rel_error(loaded.model(ids), ref(ids)) < 1e-4
    assert greedy(loaded.model, IDS, n=16) == greedy(ref, IDS, n=16)

    routed = sum(v.size for k, v in held.items() if ".mlp.experts." in k)
    total = sum(v.size for v in held.values())
    active = total - routed + routed * 2 // 8
    report = json.loads((import_gguf(path) / "mlxchat-import.json").read_text())
    assert report["parameters"] == {"total": total, "active": active}
    assert (loaded.info.parameter_count, loaded.info.active_parameter_count) == (total, active)
    assert f"{total:,} total" in import_report(import_gguf(path))


def test_gptoss_differs_from_the_model_without_sinks_yarn_or_window(tmp_path):
    """The comparison above can fail: the same weights without the sinks, without
    YaRN or without the sliding window answer differently."""
    path = tmp_path / "gpt-oss.gguf"
    held = write_gptoss(path)
    ids = mx.array(IDS)[None]
    ours = load_model(str(path)).model(ids)
    no_sinks = {k: (v * 0 if k.endswith("sinks") else v) for k, v in held.items()}
    assert rel_error(reference_model("gpt-oss", CONFIG, no_sinks)(ids), ours) > 1e-2
    no_yarn = {**CONFIG, "rope_scaling": None}
    assert rel_error(reference_model("gpt-oss", no_yarn, held)(ids), ours) > 1e-2
    no_window = {**CONFIG, "layer_types": ["full_attention", "sliding_attention"] * 2}
    assert rel_error(reference_model("gpt-oss", no_window, held)(ids), ours) > 1e-2


@pytest.mark.parametrize("extra, words", [
    ({"gpt-oss.rope.scaling.yarn_attn_factor": 0.5},
     "YaRN rope scaling with rope.scaling.yarn_attn_factor = 0.5 is not supported"),
    ({"gpt-oss.rope.scaling.type": "longrope"}, "rope scaling 'longrope' is not supported"),
])
def test_gptoss_rope_it_cannot_map_is_refused_in_one_line(tmp_path, extra, words):
    path = tmp_path / "odd.gguf"
    write_gptoss(path, **extra)
    with pytest.raises(ModelError) as info:
        load_model(str(path))
    assert words in str(info.value) and "\n" not in str(info.value)


def test_yarn_on_another_architecture_is_still_refused(tmp_path):
    """mlx-lm's qwen3_moe builds a plain RoPE: YaRN there would be silently dropped."""
    from tests.models.test_gguf_moe import CONFIGS, moe_metadata

    config = CONFIGS["qwen3moe"]
    path = tmp_path / "qwen3moe-yarn.gguf"
    meta = {**moe_metadata("qwen3moe", config), "qwen3moe.rope.scaling.type": "yarn",
            "qwen3moe.rope.scaling.factor": 4.0}
    write_model(path, "qwen3moe", random_params("qwen3moe", config), config, meta)
    with pytest.raises(ModelError, match="rope scaling 'yarn' is not supported"):
        load_model(str(path))


def test_gptoss_without_its_output_tensor_is_refused(tmp_path):
    params = random_params("gpt-oss", CONFIG, seed=13)
    params.pop("lm_head.weight")
    path = tmp_path / "tied.gguf"
    write_gptoss(path, params=params)
    with pytest.raises(ModelError, match="lacks tensor output.weight: not a complete gpt-oss"):
        load_model(str(path))


def test_gptoss_without_its_sliding_window_is_refused(tmp_path):
    """Half its layers attend within the window: without it they cannot be built."""
    meta = gptoss_metadata()
    meta.pop("gpt-oss.attention.sliding_window")
    path = tmp_path / "windowless.gguf"
    write_model(path, "gpt-oss", random_params("gpt-oss", CONFIG, seed=13), CONFIG, meta,
                kind="F16", kinds=EXPERTS)
    with pytest.raises(ModelError) as info:
        load_model(str(path))
    assert str(info.value) == (f"{path} lacks metadata gpt-oss.attention.sliding_window: "
                               "not a complete gpt-oss GGUF")
