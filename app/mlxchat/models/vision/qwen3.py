"""Qwen3-VL's family: DeepStack beside the span's embeddings.

Qwen3-VL's vision tower returns, with an image's embeddings, one array per
DeepStack level (features of early tower blocks, merged as the span's tokens
are); the language model adds level ``i`` to the hidden states at the image's
positions after its layer ``i``. They enter nothing but the prefill of the
image's own positions: the KV those layers write already holds them, so a
restored or reused span needs neither them nor the tower. ``encode`` returns
them after the embeddings, so ``VisionChat`` keeps them with the embeddings
by the image's key and hands ``forward`` the rows of the positions being fed
(a prefill cut into chunks adds each chunk's rows); only a prefill that
reaches an uncached image runs the tower.

Its features are not kept on disk, as Qwen2-VL's are not (``disk_features``
is Gemma 3's); ``features.FeatureStore`` keeps every array of a tuple,
so setting the flag is all it would take.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from mlxchat.models.vision.family import Levels, read_json
from mlxchat.models.vision.images import PreparedImage
from mlxchat.models.vision.qwen import QwenFamily, QwenImages


class Qwen3Family(QwenFamily):
    """Qwen3-VL: Qwen-VL's span and mRoPE, the tower's DeepStack levels added
    at the image's positions in the first layers."""

    def __init__(self, processor: Any, *, image_token_id: int):
        super().__init__("qwen3_vl", processor, image_token_id=image_token_id)

    def encode(self, vlm: nn.Module, image: PreparedImage) -> tuple[mx.array, ...]:
        tower = vlm.vision_tower
        pixels = mx.array(self.processor.pixels(image)).astype(
            tower.patch_embed.proj.weight.dtype)
        feats, levels = tower(pixels, mx.array([image.grid]))
        return (feats, *levels)

    def forward(self, vlm: nn.Module, ids: mx.array, embeds: mx.array, cache: Any,
                place: list[list[int]], levels: Levels | None = None) -> mx.array:
        extra = {} if levels is None else {"visual_pos_masks": levels.mask,
                                           "deepstack_visual_embeds": levels.rows}
        return vlm.language_model(ids, inputs_embeds=embeds, cache=cache,
                                  position_ids=mx.array(place)[:, None, :], **extra).logits


def qwen3_family(folder: Path, config: dict[str, Any], tokenizer: Any) -> Qwen3Family:
    """Qwen3-VL's family for a model folder."""
    settings = read_json(folder, "preprocessor_config.json")
    return Qwen3Family(QwenImages(settings, family="qwen3-vl"),
                       image_token_id=int(config["image_token_id"]))
