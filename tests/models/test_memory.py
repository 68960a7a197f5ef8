"""Memory fit: what a model needs (weights, KV per token from its config)
against what the machine gives; the KV formula is checked against the bytes
a real cache holds on each family's architecture."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.engine.kv import layers, prompt_cache
from mlxchat.models import ModelError, load_folder, memory

from tests.families.builders import FAMILIES, write_family_model

ARCHITECTURES = [f for f in FAMILIES if f.name in ("qwen3", "qwen3_next", "gemma3", "gpt_oss")]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {f.name: write_family_model(f, tmp_path_factory.mktemp(f.name))
            for f in ARCHITECTURES}


@pytest.mark.parametrize("name", [f.name for f in ARCHITECTURES])
def test_kv_bytes_per_token_match_a_real_cache(folders, name):
    loaded = load_folder(folders[name])
    config = json.loads((folders[name] / "config.json").read_text())
    cache = make_prompt_cache(loaded.model)
    measured = {}
    fed = 0
    for n in (10, 40):  # a sliding window (24) wraps between the two
        while fed < n:
            loaded.model(mx.array([[5 + fed % 50]]), cache=cache)
            fed += 1
        mx.eval([c.state for c in cache])
        measured[n] = prompt_cache.kv_bytes(cache)
    dtype = next(d.size for c in cache if (d := layers.row(c).dtype(c)) is not None)
    layout = memory.kv_layout(config, dtype)
    # Differences: a recurrent layer's fixed state is not per token.
    assert measured[40] - measured[10] == layout.bytes_at(40) - layout.bytes_at(10)


def test_weights_from_the_index_or_the_files(tmp_path, folders):
    folder = folders["qwen3"]
    assert memory.folder_weights_bytes(folder) == (folder / "model.safetensors").stat().st_size
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 123_456}, "weight_map": {}}))
    assert memory.folder_weights_bytes(tmp_path) == 123_456


def test_available_memory_sources(tmp_path):
    gpu = memory.available_memory({"max_recommended_working_set_size": 5_000_000_000})
    assert gpu == memory.Available(5_000_000_000, "recommended GPU working set")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\n")
    assert memory.available_memory({}, meminfo) == memory.Available(8_192_000_000,
                                                                     "available RAM")
    assert memory.available_memory({}, tmp_path / "missing") is None


LAYOUT = memory.KVLayout(full_bytes_per_token=1000)


def test_fit_caps_the_context_or_refuses_with_the_numbers():
    room = memory.Available(10_000_000, "available RAM")
    assert memory.fit_context("m", 1_000_000, LAYOUT, 4096, room) == memory.Fit(4096, 5_096_000)
    fit = memory.fit_context("m", 6_000_000, LAYOUT, 8192, room)
    # The largest context that fits: its bytes fit, one token more does not.
    assert 6_000_000 + LAYOUT.bytes_at(fit.context) <= room.bytes
    assert 6_000_000 + LAYOUT.bytes_at(fit.context + 1) > room.bytes
    assert fit.note and f"{fit.context:,}" in fit.note and "available RAM" in fit.note
    with pytest.raises(ModelError, match=f"--context {fit.context} fits") as asked:
        memory.fit_context("m", 6_000_000, LAYOUT, 8192, room, asked=True)
    assert "\n" not in str(asked.value)
    with pytest.raises(ModelError, match="too little") as refused:
        memory.fit_context("big", 9_900_000, LAYOUT, 8192, room)
    assert "9.9 MB of weights" in str(refused.value) and "10.0 MB" in str(refused.value)
    with pytest.raises(ModelError, match="not downloaded"):
        memory.check_download("big", 20_000_000, room)
    memory.check_download("small", 2_000_000, room)


def test_loading_caps_the_window_to_what_fits(folders):
    folder = folders["qwen3"]
    config = json.loads((folder / "config.json").read_text())
    weights = memory.folder_weights_bytes(folder)
    per_token = memory.kv_layout(config, 4).full_bytes_per_token  # float32 on the CPU path
    room = memory.Available(weights + per_token * 1000, "available RAM")
    loaded = load_folder(folder, available=room)
    assert loaded.info.context_window == 1000 < config["max_position_embeddings"]
    assert loaded.info.memory_note and "1,000 tokens" in loaded.info.memory_note
    with pytest.raises(ModelError, match="too little"):
        load_folder(folder, available=memory.Available(weights, "available RAM"))
    plenty = load_folder(folder, available=None)  # unknown: no cap, no note
    assert plenty.info.context_window == config["max_position_embeddings"]
    assert plenty.info.memory_note is None


def test_rope_scaling_passes_through_to_the_model(folders):
    plain = load_folder(folders["qwen3"])
    yarn = load_folder(folders["qwen3"], rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})
    kinds = {type(m.layers[0].self_attn.rope).__name__ for m in (plain.model.model,
                                                                 yarn.model.model)}
    assert len(kinds) == 2 and "YarnRoPE" in kinds


def test_a_catalog_alias_passes_rope_scaling_to_the_model(folders):
    from mlxchat import paths
    from mlxchat.models import add_user_alias, catalog, load_model

    path = paths.user_catalog_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[models]\n"long" = {{ source = "{folders["qwen3"]}", context = 16384, '
                    'rope_scaling = { rope_type = "yarn", factor = 4.0, '
                    'original_max_position_embeddings = 4096 } }\n')
    loaded = load_model("long")
    assert type(loaded.model.model.layers[0].self_attn.rope).__name__ == "YarnRoPE"
    assert loaded.info.context_window == 16384
    # Rewriting the file (another alias added) keeps the option.
    add_user_alias("other", str(folders["qwen3"]))
    assert catalog.lookup("long").rope_scaling["factor"] == 4.0
