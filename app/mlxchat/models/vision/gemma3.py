"""Gemma 3's images: every image resized to one square (896 pixels in the
published models), cut into SigLIP patches and pooled into a fixed number of
soft tokens (256), written as mlx-vlm's processor writes them:
``\\n\\n<start_of_image>`` + the image's tokens + ``<end_of_image>\\n\\n`` in
place of the ``<start_of_image>`` the chat template writes.

The language model is mlx-vlm's, called as its own generation calls it: the
image's embeddings are the projector's output divided by the square root of
the model config's ``hidden_size`` (the language model multiplies every
embedding back), and the attention is causal everywhere, image tokens too
(mlx-vlm 0.7.10 builds a bidirectional mask only in ``Model.__call__``, whose
generation loop never passes it to the language model). Its cache is mlx-lm's:
a ``RotatingKVCache`` of ``sliding_window`` positions for the five local
layers of every six, a ``KVCache`` for the global one.
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


class Gemma3Images:
    """The image processor of a Gemma 3 folder (transformers' PIL one)."""

    def __init__(self, config: dict[str, Any], *, tokens: int):
        from transformers.models.gemma3.image_processing_pil_gemma3 import (
            Gemma3ImageProcessorPil,
        )

        kept = {k: v for k, v in config.items()
                if k not in ("image_processor_type", "processor_class", "image_seq_length")
                and v is not None}
        kept["do_pan_and_scan"] = False  # one view of each image (the published default)
        self._hf = Gemma3ImageProcessorPil(**kept)
        self.tokens = tokens
        side = int(round(tokens ** 0.5))
        if side * side != tokens:
            raise ValueError(f"{tokens} tokens per image is not a square")
        self.side = side
        size = self._hf.size
        self.settings = json.dumps({"family": "gemma3", "size": [size.height, size.width],
                                    "tokens": tokens, "resample": int(self._hf.resample),
                                    "mean": list(self._hf.image_mean),
                                    "std": list(self._hf.image_std)}, sort_keys=True)

    def prepare(self, ref: ImageRef) -> PreparedImage:
        """Every image takes the same tokens: only its header is checked."""
        read_header(Path(ref.path))
        return PreparedImage(ref=ref, key=image_key(ref.digest, self.settings),
                             grid=(1, self.side, self.side), merged=(self.side, self.side))

    def pixels(self, image: PreparedImage) -> np.ndarray:
        """(1, 3, size, size) float32, as mlx-vlm's processor gives them."""
        if image.pixels is None:
            out = self._hf(images=[decode(Path(image.ref.path))], return_tensors="np")
            pixels = np.asarray(out["pixel_values"], dtype=np.float32)
            if pixels.shape[0] != 1:
                raise ImageRefused(f"{image.ref.name or image.ref.digest[:12]}: the processor "
                                   "cut it into several views")
            image.pixels = pixels
        return image.pixels


class Gemma3Family:
    """Gemma 3 (4B, 12B, 27B): SigLIP tower, pooled projector, sliding windows."""

    name = "gemma3"
    disk_features = True
    """An edit before an image recomputes its span: keep its features on disk."""

    def __init__(self, processor: Gemma3Images, *, boi: int, eoi: int, newlines: list[int]):
        self.processor = processor
        self.placeholder_id = boi
        self._eoi = eoi
        self._newlines = list(newlines)

    def span(self, image: PreparedImage) -> list[int]:
        nl = self._newlines
        return [*nl, self.placeholder_id, *[image.key] * image.tokens, self._eoi, *nl]

    def encode(self, vlm: nn.Module, image: PreparedImage) -> mx.array:
        dtype = vlm.language_model.model.embed_tokens.weight.dtype
        pixels = mx.array(self.processor.pixels(image))
        hidden, _, _ = vlm.vision_tower(pixels.transpose(0, 2, 3, 1).astype(dtype),
                                        output_hidden_states=True)
        feats = vlm.multi_modal_projector(hidden)[0]
        return feats / (vlm.config.hidden_size ** 0.5)

    def forward(self, vlm: nn.Module, ids: mx.array, embeds: mx.array, cache: Any,
                place: list[list[int]], levels: Levels | None = None) -> mx.array:
        return vlm.language_model(ids, inputs_embeds=embeds, cache=cache).logits

    def make_cache(self, vlm: nn.Module) -> list[Any]:
        from mlx_lm.models.cache import KVCache, RotatingKVCache

        cfg = vlm.language_model.config
        pattern = cfg.sliding_window_pattern
        return [KVCache() if i % pattern == pattern - 1
                else RotatingKVCache(max_size=cfg.sliding_window, keep=0)
                for i in range(cfg.num_hidden_layers)]


def gemma3_family(folder: Path, config: dict[str, Any], tokenizer: Any) -> Gemma3Family:
    """The family object of a Gemma 3 folder: its processor's settings, the
    image markers' ids and the tokens of ``\\n\\n`` around each image."""
    pre = read_json(folder, "preprocessor_config.json")
    tokens = int(config.get("mm_tokens_per_image")
                 or config.get("text_config", {}).get("mm_tokens_per_image") or 256)
    newlines = tokenizer.encode("\n\n", add_special_tokens=False)
    return Gemma3Family(Gemma3Images(pre, tokens=tokens),
                        boi=int(config.get("boi_token_index", 255999)),
                        eoi=int(config.get("eoi_token_index", 256000)), newlines=newlines)
