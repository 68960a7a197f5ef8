"""The compute-dtype policy: what a model computes in, whatever its scales are stored in."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from mlxchat.models import import_gguf, load_folder, load_model, precision
from mlxchat.models.info import recast

from tests.models.loud_gemma import perplexity, reference, sampled_ids, write_loud_gemma


def float_dtypes(model) -> set[str]:
    return {str(v.dtype) for _, v in tree_flatten(model.parameters())
            if mx.issubdtype(v.dtype, mx.floating)}


@pytest.mark.parametrize("config, cpu, dtype", [
    ({"model_type": "gemma3_text", "torch_dtype": "float16"}, False, "bfloat16"),
    ({"model_type": "gemma2"}, False, "bfloat16"),
    ({"model_type": "qwen3", "compute_dtype": {"gpu": "bfloat16"}}, False, "bfloat16"),
    ({"model_type": "llama", "torch_dtype": "float16"}, False, "float16"),
    ({"model_type": "gpt_oss"}, False, "bfloat16"),
    ({"model_type": "unheard_of"}, False, "bfloat16"),
    ({"model_type": "gemma3_text"}, True, "float32"),
    ({"model_type": "llama", "torch_dtype": "float16"}, True, "float32"),
])
def test_policy(config, cpu, dtype):
    assert precision.default_dtype(config, cpu=cpu) == dtype


@pytest.fixture(scope="module")
def loud(tmp_path_factory):
    """The loud tiny Gemma 3 as a Q5_0/Q8_0 file (float16 scales), imported once."""
    path = tmp_path_factory.mktemp("loud") / "gemma-q5_0.gguf"
    held = write_loud_gemma(path, "Q5_0/Q8_0")
    ref_model = reference(held)
    ids = sampled_ids(ref_model, n=64)
    return path, import_gguf(path), ref_model, ids


def test_float16_scales_compute_in_float32_on_the_cpu(loud):
    path, folder, ref_model, ids = loud
    config = json.loads((folder / "config.json").read_text())
    assert config["compute_dtype"] == {"cpu": "float32", "gpu": "bfloat16"}
    loaded = load_model(str(path))
    q = loaded.model.model.layers[0].self_attn.q_proj
    assert q.bits == 5 and q.scales.dtype == mx.float32  # the file's are float16
    assert float_dtypes(loaded.model) == {"mlx.core.float32"}
    assert (loaded.info.compute_dtype, loaded.info.default_compute_dtype) == ("float32",) * 2
    ours, ref = perplexity(loaded.model, ids), perplexity(ref_model, ids)
    assert ours / ref <= 1.001
    # What the policy avoids: the same file computing in float16 overflows.
    f16 = load_folder(folder, available=None, compute_dtype="float16")
    assert f16.info.compute_dtype == "float16" and f16.info.default_compute_dtype == "float32"
    ratio = perplexity(f16.model, ids) / ref
    assert not ratio <= 1.01  # nan (overflow) or a visible loss


def test_recast_starts_from_the_stored_values(loud):
    _, folder, _, ids = loud
    loaded = load_folder(folder, available=None)
    before = {k: v for k, v in tree_flatten(loaded.model.parameters())}
    stored = mx.load(str(folder / "model.safetensors"))
    logits = loaded.model(mx.array(ids)[None])
    half = recast(recast(loaded, "bfloat16"), "float16")
    assert half.info.compute_dtype == "float16" and half.info.fingerprint != loaded.info.fingerprint
    assert half.info.model_fingerprint == loaded.info.model_fingerprint
    scales = "model.layers.0.self_attn.q_proj.scales"
    # bfloat16 in between, yet the file's float16 scales come back exactly
    assert mx.array_equal(dict(tree_flatten(half.model.parameters()))[scales],
                          stored[scales]).item()
    back = recast(half, "float32")
    assert back.info.fingerprint == loaded.info.fingerprint
    for k, v in tree_flatten(back.model.parameters()):
        assert v.dtype == before[k].dtype and mx.array_equal(v, before[k]).item(), k
    assert mx.array_equal(back.model(mx.array(ids)[None]), logits).item()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_current_dtype_is_the_first_float_parameter(tiny, dtype):
    """The early-stopping walk names what flattening every parameter names."""
    model = tiny.model
    try:
        precision.apply(model, dtype)
        first = next(v.dtype for _, v in tree_flatten(model.parameters())
                     if mx.issubdtype(v.dtype, mx.floating))
        assert precision.current_dtype(model) == str(first).removeprefix("mlx.core.") == dtype
    finally:
        precision.apply(model, "float32")
