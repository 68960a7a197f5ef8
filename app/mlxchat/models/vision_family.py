"""What differs between vision-language families, behind one interface.

``VisionChat`` drives every family the same way: images known by their key,
each image's placeholder span in the token ledger, features computed only
for positions no cache holds, the language model on mlx-lm's cache layers.
A family says the rest: how an image becomes pixels and how many tokens it
takes (its ``processor``), which token the chat template writes for an image
and the ids that token becomes (``span``: the image's key once per token,
with the family's markers around it), how pixels become the embeddings of
those tokens (``encode``: the vision tower and projector), how the language
model is called with them (``forward``: mRoPE positions for Qwen-VL), and
the cache layers it takes (``make_cache``: sliding windows for Gemma 3).
The family is chosen by the config's ``model_type`` (``vision_load.make_family``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import mlx.core as mx
import mlx.nn as nn

from mlxchat.models.vision_images import PreparedImage


class ImageProcessor(Protocol):
    settings: str
    """What changes an image's tokens (hashed into its key)."""

    def prepare(self, ref: Any) -> PreparedImage: ...

    def pixels(self, image: PreparedImage) -> Any: ...


class VisionFamily(Protocol):
    name: str
    processor: ImageProcessor
    placeholder_id: int
    """The token the chat template writes where an image goes."""

    def span(self, image: PreparedImage) -> list[int]:
        """The ids that replace one placeholder: the image's key once per
        token it takes, and the family's markers around them."""

    def encode(self, vlm: nn.Module, image: PreparedImage) -> mx.array:
        """The embeddings of the image's tokens, in span order (tokens, dims)."""

    def forward(self, vlm: nn.Module, ids: mx.array, embeds: mx.array, cache: Any,
                place: list[list[int]]) -> mx.array:
        """The language model's logits for ``embeds`` (``ids``: text ids, 0 for
        image tokens; ``place``: mRoPE positions, three lists)."""

    def make_cache(self, vlm: nn.Module) -> list[Any]:
        """mlx-lm cache layers for the language model."""


class QwenFamily:
    """Qwen2-VL and Qwen2.5-VL: the template's ``<|image_pad|>`` becomes the
    image's grid of merged patches, placed by multimodal RoPE."""

    def __init__(self, name: str, processor: Any, *, image_token_id: int):
        self.name = name
        self.processor = processor
        self.placeholder_id = image_token_id

    def span(self, image: PreparedImage) -> list[int]:
        return [image.key] * image.tokens

    def encode(self, vlm: nn.Module, image: PreparedImage) -> mx.array:
        tower = vlm.vision_tower
        pixels = mx.array(self.processor.pixels(image)).astype(
            tower.patch_embed.proj.weight.dtype)
        return tower(pixels, mx.array([image.grid]), output_hidden_states=False)

    def forward(self, vlm: nn.Module, ids: mx.array, embeds: mx.array, cache: Any,
                place: list[list[int]]) -> mx.array:
        return vlm.language_model(ids, inputs_embeds=embeds, cache=cache,
                                  position_ids=mx.array(place)[:, None, :]).logits

    def make_cache(self, vlm: nn.Module) -> list[Any]:
        from mlx_lm.models.cache import KVCache

        return [KVCache() for _ in vlm.language_model.layers]


def read_json(folder: Path, name: str) -> dict[str, Any]:
    """A settings file of the folder (ModelError in one line)."""
    from mlxchat.models.errors import ModelError

    try:
        return json.loads((folder / name).read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the image processor's settings in {folder}: "
                         f"{exc}") from None

