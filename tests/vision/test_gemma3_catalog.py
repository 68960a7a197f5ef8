"""The catalog's Gemma 3 entries: vision models, their KV figures those of
the published configs (data/SOURCES.md)."""

from __future__ import annotations

import pytest

from mlxchat.models.catalog import lookup
from mlxchat.models.memory import kv_layout
from mlxchat.models.vision.load import is_vision_config

PUBLISHED = {
    # google/gemma-3-*-it config.json, the text_config fields the KV depends on.
    "gemma3-4b": {"num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4,
                  "head_dim": 256, "sliding_window": 1024, "sliding_window_pattern": 6},
    "gemma3-12b": {"num_hidden_layers": 48, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "head_dim": 256, "sliding_window": 1024,
                   "sliding_window_pattern": 6},
    "gemma3-27b": {"num_hidden_layers": 62, "num_attention_heads": 32,
                   "num_key_value_heads": 16, "head_dim": 128, "sliding_window": 1024,
                   "sliding_window_pattern": 6},
}


@pytest.mark.parametrize("alias", sorted(PUBLISHED))
def test_gemma3_entries_see_images_with_their_published_kv(alias):
    entry = lookup(alias)
    config = {"model_type": "gemma3", "text_config": PUBLISHED[alias],
              "vision_config": {"image_size": 896, "patch_size": 14}}
    assert entry is not None and entry.images
    assert is_vision_config(config)
    layout = kv_layout(config, 2)
    assert entry.kv_bytes_per_token == layout.full_bytes_per_token
    # Five local layers of every six hold 1,024 positions at most.
    assert layout.windows == ((layout.full_bytes_per_token * (
        PUBLISHED[alias]["num_hidden_layers"] - PUBLISHED[alias]["num_hidden_layers"] // 6)
        // (PUBLISHED[alias]["num_hidden_layers"] // 6), 1024),)
