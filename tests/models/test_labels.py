"""Truthful labels: the quantization mode read from the modules, and total
and active parameters of mixtures of experts counted over the arrays."""

from __future__ import annotations

import json

import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten

from mlxchat.models import load_folder
from mlxchat.models.info import parameter_counts, quantization_label

from tests.families.builders import FAMILIES, write_family_model


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    def get(name: str):
        fam = next(f for f in FAMILIES if f.name == name)
        folder = write_family_model(fam, tmp_path_factory.mktemp(name))
        return load_folder(folder), json.loads((folder / "config.json").read_text())
    return get


@pytest.mark.parametrize("name", ["qwen3_moe-r1", "qwen3_next", "gpt_oss"])
def test_moe_total_and_active_parameters_count_the_arrays(made, name):
    loaded, config = made(name)
    k = config["num_experts_per_tok"]
    experts = config.get("num_experts") or config["num_local_experts"]
    arrays = dict(tree_flatten(loaded.model.parameters()))
    total = sum(a.size for a in arrays.values())
    # Routed experts are stacked (E, out, in) arrays of the switch layers;
    # shared experts (qwen3_next) are plain layers and count in full.
    routed = [a for key, a in arrays.items() if ".experts." in key or "switch_mlp" in key]
    assert routed and all(a.shape[0] == experts for a in routed)
    active = total - sum(a.size - a.size * k // experts for a in routed)
    assert parameter_counts(loaded.model, config) == (total, active)
    assert (loaded.info.parameter_count, loaded.info.active_parameter_count) == (total, active)
    assert active < total


def test_a_dense_model_is_all_active(made):
    loaded, config = made("qwen3")
    total = sum(a.size for _, a in tree_flatten(loaded.model.parameters()))
    assert parameter_counts(loaded.model, config) == (total, total)


@pytest.mark.parametrize("mode, bits, group, label", [
    ("affine", 4, 32, "int4 (g32)"), ("affine", 8, 64, "int8 (g64)"),
    ("mxfp4", 4, 32, "MXFP4 (g32)")])
def test_quantization_mode_is_read_from_the_modules(made, mode, bits, group, label):
    loaded, config = made("gpt_oss")
    model = loaded.model
    before = sum(a.size for _, a in tree_flatten(model.parameters()))
    nn.quantize(model, group_size=group, bits=bits, mode=mode,
                class_predicate=lambda path, m: hasattr(m, "to_quantized")
                and not isinstance(m, nn.Embedding))
    assert quantization_label(model)[0] == label
    total, active = parameter_counts(model, config)
    assert total == before  # quantized weights count as the values they pack
    assert active < total
