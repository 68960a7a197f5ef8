"""Qwen2-VL and Qwen2.5-VL: the template's ``<|image_pad|>`` becomes the
image's grid of merged patches, placed by multimodal RoPE. Qwen3-VL (``qwen3``)
takes the same images and span, and adds its DeepStack levels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from mlxchat.chat import ImageRef
from mlxchat.models.vision.family import Levels, read_json
from mlxchat.models.vision.images import (
    ImageRefused,
    PreparedImage,
    decode,
    image_key,
    read_header,
)


class QwenImages:
    """Qwen2-VL, Qwen2.5-VL and Qwen3-VL's image processing: resized to a
    multiple of patch x merge within [min, max] pixels, patches of 2 frames (an
    image is repeated), each 2x2 patches merged into one placeholder token.
    ``family`` joins the settings an image's key is made of (Qwen2-VL's and
    Qwen2.5-VL's keys stay as they were)."""

    def __init__(self, config: dict[str, Any], *, family: str = "qwen2-vl"):
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        self._hf = Qwen2VLImageProcessorPil(**{k: v for k, v in config.items()
                                               if k not in ("image_processor_type",
                                                            "processor_class")})
        self.patch = int(self._hf.patch_size)
        self.merge = int(self._hf.merge_size)
        self.min_pixels = int(self._hf.size["shortest_edge"])
        self.max_pixels = int(self._hf.size["longest_edge"])
        self.settings = json.dumps({"family": family, "patch": self.patch,
                                    "merge": self.merge, "min": self.min_pixels,
                                    "max": self.max_pixels,
                                    "mean": list(self._hf.image_mean),
                                    "std": list(self._hf.image_std)}, sort_keys=True)

    def prepare(self, ref: ImageRef) -> PreparedImage:
        """The image's key and geometry from its header alone (no decoding)."""
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        header = read_header(Path(ref.path))
        factor = self.patch * self.merge
        h, w = smart_resize(header.height, header.width, factor=factor,
                            min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        grid = (1, h // self.patch, w // self.patch)
        return PreparedImage(ref=ref, key=image_key(ref.digest, self.settings), grid=grid,
                             merged=(grid[1] // self.merge, grid[2] // self.merge))

    def pixels(self, image: PreparedImage) -> np.ndarray:
        """The processor's patches of the decoded image (its grid checked)."""
        if image.pixels is None:
            out = self._hf(images=[decode(Path(image.ref.path))], return_tensors="np")
            if tuple(int(x) for x in out["image_grid_thw"][0]) != image.grid:
                raise ImageRefused(f"{image.ref.name or image.ref.digest[:12]}: the processor "
                                   "cut it into another grid than its header predicts")
            image.pixels = np.asarray(out["pixel_values"])
        return image.pixels


class QwenFamily:
    """Qwen2-VL and Qwen2.5-VL (Qwen3-VL: ``qwen3.Qwen3Family``):
    the template's ``<|image_pad|>`` becomes the image's grid of merged
    patches, placed by multimodal RoPE."""

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
                place: list[list[int]], levels: Levels | None = None) -> mx.array:
        return vlm.language_model(ids, inputs_embeds=embeds, cache=cache,
                                  position_ids=mx.array(place)[:, None, :]).logits

    def make_cache(self, vlm: nn.Module) -> list[Any]:
        from mlx_lm.models.cache import KVCache

        return [KVCache() for _ in vlm.language_model.layers]


def qwen_family(folder: Path, config: dict[str, Any], tokenizer: Any) -> QwenFamily:
    """Qwen2-VL's or Qwen2.5-VL's family for a model folder."""
    return QwenFamily(config["model_type"],
                      QwenImages(read_json(folder, "preprocessor_config.json")),
                      image_token_id=int(config["image_token_id"]))
