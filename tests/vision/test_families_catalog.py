"""The catalog's Mistral 3 and SmolVLM entries: vision models, their KV
figures those of the published configs (data/SOURCES.md), one KV layer kind."""

from __future__ import annotations

import pytest

from mlxchat.models.catalog import lookup
from mlxchat.models.memory import kv_layout
from mlxchat.models.vision.load import is_vision_config

PUBLISHED = {
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503 config.json's text_config.
    "mistral-small-3.1-24b": ("mistral3", {
        "model_type": "mistral", "num_hidden_layers": 40, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 5120,
        "max_position_embeddings": 131072}),
    # SmolVLM-256M / -500M-Instruct: SmolLM2-135M's and SmolLM2-360M's text models.
    "smolvlm-256m": ("smolvlm", {
        "model_type": "llama", "num_hidden_layers": 30, "num_attention_heads": 9,
        "num_key_value_heads": 3, "hidden_size": 576, "max_position_embeddings": 8192}),
    "smolvlm-500m": ("smolvlm", {
        "model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 15,
        "num_key_value_heads": 5, "hidden_size": 960, "max_position_embeddings": 8192}),
}


@pytest.mark.parametrize("alias", sorted(PUBLISHED))
def test_entries_see_images_with_their_published_kv(alias):
    family, text = PUBLISHED[alias]
    entry = lookup(alias)
    config = {"model_type": family, "text_config": text,
              "vision_config": {"image_size": 1540, "patch_size": 14}}
    assert entry is not None and entry.images
    assert is_vision_config(config)
    layout = kv_layout(config, 2)
    assert entry.kv_bytes_per_token == layout.full_bytes_per_token and not layout.windows
    assert entry.context_window == text["max_position_embeddings"]


def test_the_text_only_mistral_small_is_not_the_vision_one():
    text_only, vision = lookup("mistral-small-24b"), lookup("mistral-small-3.1-24b")
    assert text_only is not None and not text_only.images and "2501" in text_only.source
    assert vision is not None and "2503" in vision.source
