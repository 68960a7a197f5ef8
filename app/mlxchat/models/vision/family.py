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
Each family is a module of this package (``qwen``, ``qwen3``, ``gemma3``,
``smolvlm``, ``mistral3``) with a ``<name>_family(folder, config, tokenizer)``;
the config's ``model_type`` chooses it (``load.make_family``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import mlx.core as mx
import mlx.nn as nn

from mlxchat.models.vision.images import PreparedImage


class Levels(NamedTuple):
    """The further outputs of a family's ``encode`` (Qwen3-VL's DeepStack
    levels) for the tokens being fed: ``mask`` (1, tokens) marks the image
    positions, ``rows`` holds per output its rows at those positions, in order."""

    mask: mx.array
    rows: list[mx.array]


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

    def encode(self, vlm: nn.Module, image: PreparedImage) -> mx.array | tuple[mx.array, ...]:
        """The embeddings of the image's tokens, in span order (tokens, dims);
        or a tuple of them and further outputs with a row per token each
        (Qwen3-VL's DeepStack levels), kept beside them by the image's key."""

    def forward(self, vlm: nn.Module, ids: mx.array, embeds: mx.array, cache: Any,
                place: list[list[int]], levels: Levels | None = None) -> mx.array:
        """The language model's logits for ``embeds`` (``ids``: text ids, 0 for
        image tokens; ``place``: mRoPE positions, three lists; ``levels``: the
        further outputs of ``encode`` at the image positions fed, None if none)."""

    def make_cache(self, vlm: nn.Module) -> list[Any]:
        """mlx-lm cache layers for the language model."""


def read_json(folder: Path, name: str) -> dict[str, Any]:
    """A settings file of the folder (ModelError in one line)."""
    from mlxchat.models.errors import ModelError

    try:
        return json.loads((folder / name).read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the image processor's settings in {folder}: "
                         f"{exc}") from None

