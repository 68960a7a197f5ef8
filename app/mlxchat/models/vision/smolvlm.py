"""SmolVLM and Idefics3's images: an image larger than one tile is resized
(longest edge ``size``) and cut into rows x columns tiles of ``max_image_size``
pixels, plus the whole image at one tile's size (the global view); each tile
is ``image_seq_len`` tokens after the pixel-shuffle connector. The span is
written as transformers' processor writes it:
``<fake_token_around_image><row_R_col_C>`` + the tile's tokens for each tile,
a newline after each row, then ``\\n<fake_token_around_image><global-img>`` +
the global view's tokens + ``<fake_token_around_image>``.

Each tile is its own run of placeholders with its own key (the image's bytes,
the processor's settings, the tile's place), so the same image at another
split setting is another span, and a tile's features are looked up by its key
as a whole image's are. The language model is mlx-vlm's Llama-like one on
mlx-lm's ``KVCache`` layers, with plain RoPE positions.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
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

FAKE, IMAGE, GLOBAL = "<fake_token_around_image>", "<image>", "<global-img>"


@dataclass
class TileImage(PreparedImage):
    """One tile of a split image (the global view last): its own span."""

    whole: PreparedImage | None = None
    index: int = 0


@dataclass
class SplitImage(PreparedImage):
    """An image as its tiles (``grid``: 1, rows, columns); ``VisionChat``
    knows each of ``parts`` by its key."""

    parts: list[TileImage] = field(default_factory=list)


class SmolVLMImages:
    """The image processor of a SmolVLM / Idefics3 folder (transformers' PIL one)."""

    def __init__(self, config: dict[str, Any], *, seq_len: int, family: str):
        if family == "smolvlm":
            from transformers.models.smolvlm.image_processing_pil_smolvlm import (
                SmolVLMImageProcessorPil as Processor,
            )
        else:
            from transformers.models.idefics3.image_processing_pil_idefics3 import (
                Idefics3ImageProcessorPil as Processor,
            )
        kept = {k: v for k, v in config.items()
                if k not in ("image_processor_type", "processor_class") and v is not None}
        self._hf = Processor(**kept)
        self.seq_len = seq_len
        hf = self._hf
        self.settings = json.dumps({
            "family": family, "size": hf.size.longest_edge, "tile": hf.max_image_size,
            "split": bool(hf.do_image_splitting), "tokens": seq_len,
            "resample": int(hf.resample), "mean": list(hf.image_mean),
            "std": list(hf.image_std)}, sort_keys=True)

    def layout(self, width: int, height: int) -> tuple[int, int]:
        """Rows and columns of tiles (0, 0: the global view alone)."""
        _, rows, cols = self._hf.get_number_of_image_patches(height, width)
        return rows, cols

    def prepare(self, ref: ImageRef) -> PreparedImage:
        """The image's layout from its header; its tiles in ``parts``."""
        header = read_header(Path(ref.path))
        rows, cols = self.layout(header.width, header.height)
        tiles = rows * cols + 1 if rows else 1
        whole = SplitImage(ref=ref, key=image_key(ref.digest, self.settings),
                           grid=(1, rows, cols), merged=(tiles, self.seq_len))
        whole.parts = [TileImage(ref=ref, key=image_key(ref.digest, f"{self.settings}\n{i}"),
                                 grid=(1, 1, self.seq_len), merged=(1, self.seq_len),
                                 whole=whole, index=i) for i in range(tiles)]
        return whole

    def pixels(self, image: PreparedImage) -> np.ndarray:
        """(tiles, 3, tile, tile) float32 of the whole image, as mlx-vlm's processor gives them."""
        if image.pixels is None:
            out = self._hf(images=[[decode(Path(image.ref.path))]], return_tensors="np",
                           return_row_col_info=True)
            rows, cols = int(out["rows"][0][0]), int(out["cols"][0][0])
            if (1, rows, cols) != image.grid:
                raise ImageRefused(f"{image.ref.name or image.ref.digest[:12]}: the processor "
                                   "split it otherwise than its header says")
            image.pixels = np.asarray(out["pixel_values"], dtype=np.float32)[0]
        return image.pixels


class SmolVLMFamily:
    """SmolVLM (256M, 500M, 2.2B) and Idefics3: SigLIP tiles, pixel shuffle."""

    disk_features = False

    def __init__(self, name: str, processor: SmolVLMImages, *, image_id: int,
                 markers: dict[str, list[int]]):
        self.name = name
        self.processor = processor
        self.placeholder_id = image_id
        self._markers = markers
        """The ids of each marker the span writes (``<row_1_col_2>``, "\\n", ...)."""

    def span(self, image: PreparedImage) -> list[int]:
        assert isinstance(image, SplitImage)
        m, tiles = self._markers, image.parts
        rows, cols = image.grid[1:]
        out: list[int] = []
        for r in range(rows):
            for c in range(cols):
                out += m[FAKE] + m[f"<row_{r + 1}_col_{c + 1}>"]
                out += [tiles[r * cols + c].key] * self.processor.seq_len
            out += m["\n"]
        out += (m["\n"] if rows else []) + m[FAKE] + m[GLOBAL]
        return out + [tiles[-1].key] * self.processor.seq_len + m[FAKE]

    def encode(self, vlm: nn.Module, image: PreparedImage) -> mx.array:
        """One tile's tokens (the tower runs on that tile alone)."""
        assert isinstance(image, TileImage) and image.whole is not None
        tile = self.processor.pixels(image.whole)[image.index]
        dtype = vlm.language_model.embed_tokens.weight.dtype
        pixels = mx.array(tile[None]).transpose(0, 2, 3, 1).astype(dtype)
        patch = vlm.config.vision_config.patch_size
        mask = mx.ones((1, pixels.shape[1] // patch, pixels.shape[2] // patch), dtype=mx.bool_)
        hidden, *_ = vlm.vision_model(pixels, patch_attention_mask=mask,
                                      output_hidden_states=True)
        return vlm.connector(hidden.astype(dtype))[0]

    def forward(self, vlm: nn.Module, ids: mx.array, embeds: mx.array, cache: Any,
                place: list[list[int]], levels: Levels | None = None) -> mx.array:
        return vlm.language_model(ids, inputs_embeds=embeds, cache=cache).logits

    def make_cache(self, vlm: nn.Module) -> list[Any]:
        from mlx_lm.models.cache import KVCache

        return [KVCache() for _ in vlm.language_model.layers]


def smolvlm_family(folder: Path, config: dict[str, Any], tokenizer: Any) -> SmolVLMFamily:
    """The family object of a SmolVLM or Idefics3 folder: its processor's
    settings, its tokens per tile and the ids of the span's markers."""
    pre = read_json(folder, "preprocessor_config.json")
    vision = config["vision_config"]
    scale = int(config.get("scale_factor", 2))
    seq_len = (int(vision["image_size"]) // int(vision["patch_size"])) ** 2 // scale ** 2
    processor = SmolVLMImages(pre, seq_len=seq_len, family=config["model_type"])
    hf = processor._hf
    most = math.ceil(hf.size.longest_edge / hf.max_image_size["longest_edge"])
    names = [FAKE, GLOBAL, "\n"] + [f"<row_{r}_col_{c}>" for r in range(1, most + 1)
                                    for c in range(1, most + 1)]
    markers = {n: tokenizer.encode(n, add_special_tokens=False) for n in names}
    image_id = int(config.get("image_token_id") or config.get("image_token_index"))
    return SmolVLMFamily(config["model_type"], processor, image_id=image_id, markers=markers)
