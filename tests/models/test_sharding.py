"""Whether a model splits over N ranks is decided from its config before
loading, and a model that does not is refused in one line with the numbers."""

from __future__ import annotations

import pytest

from mlxchat.models import ModelError
from mlxchat.models.sharding import plan_split, support, tensor_problems

SMOLLM2 = {"model_type": "llama", "hidden_size": 576, "num_attention_heads": 9,
           "num_key_value_heads": 3, "intermediate_size": 1536, "num_hidden_layers": 30}
LLAMA = {**SMOLLM2, "num_attention_heads": 32, "num_key_value_heads": 8,
         "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32}


def test_support_reads_mlx_lm_modules():
    assert support("llama").tensor and not support("llama").pipeline
    assert support("qwen2").tensor and support("qwen2").pipeline
    assert support("qwen3_next").pipeline and not support("qwen3_next").tensor
    assert support("gemma3_text") == support("no_such_type") == type(support("x"))(False, False)


def test_smollm2_is_refused_on_two_ranks_with_its_numbers():
    with pytest.raises(ModelError) as exc:
        plan_split(SMOLLM2, 2, name="smollm2-135m")
    message = str(exc.value)
    assert "\n" not in message
    assert "attention heads 9 % 2 = 1" in message and "KV heads 3 % 2 = 1" in message
    assert plan_split(SMOLLM2, 3).mode == "tensor"  # 9 and 3 divide by 3


def test_tensor_preferred_and_pipeline_where_heads_do_not_divide():
    assert plan_split(LLAMA, 8).label == "8 ranks · tensor"
    odd_qwen2 = {**SMOLLM2, "model_type": "qwen2"}
    plan = plan_split(odd_qwen2, 2)
    assert (plan.mode, plan.ranks) == ("pipeline", 2)
    with pytest.raises(ModelError, match="attention heads 9 % 2"):
        plan_split(odd_qwen2, 2, mode="tensor")
    with pytest.raises(ModelError, match="30 layers for 32 pipeline stages"):
        plan_split({**odd_qwen2, "num_attention_heads": 7}, 32)


def test_models_mlx_lm_cannot_split_are_refused():
    with pytest.raises(ModelError, match="neither Model.shard nor pipeline"):
        plan_split({"model_type": "gemma3_text"}, 2)
    with pytest.raises(ModelError, match="no pipeline support"):
        plan_split(SMOLLM2, 2, mode="pipeline")
    with pytest.raises(ModelError, match="at least 2 ranks"):
        plan_split(LLAMA, 1)


def test_expert_widths_and_quantization_groups_are_counted():
    moe = {"model_type": "qwen3_moe", "num_attention_heads": 4, "num_key_value_heads": 2,
           "hidden_size": 64, "head_dim": 16, "intermediate_size": 128,
           "moe_intermediate_size": 48, "num_hidden_layers": 2}
    assert tensor_problems(moe, 2) == []
    assert tensor_problems(moe, 4) == ["KV heads 2 % 4 = 2"]
    assert tensor_problems(moe, 32) == ["attention heads 4 % 32 = 4", "KV heads 2 % 32 = 2",
                                        "expert feed-forward width 48 % 32 = 16"]
    quantized = {**moe, "quantization": {"group_size": 32, "bits": 4}}
    assert tensor_problems(quantized, 2) == [
        "expert feed-forward width 48 / 2 = 24 is not a multiple of the quantization group 32"]
