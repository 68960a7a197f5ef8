"""Mistral 3's images (Mistral Small 3.1 / 3.2, a Pixtral vision tower): an
image keeps its aspect, resized so its longest edge fits ``size`` (1,540
pixels in the published models) and each side rounded up to a multiple of
patch x merge (14 x 2); the tower sees its patches at their place (2D RoPE)
and the projector merges each 2 x 2 of them into one token. The span is
written as mlx-vlm's processor writes it, row by row: a row's tokens, then
``[IMG_BREAK]``, the last row ending in ``[IMG_END]`` instead, in place of the
``[IMG]`` the chat template writes. Its length depends on the image's size:
rows x columns tokens, and a marker a row.

Every token of an image is its key, the markers between its rows are text
(``model.Positions`` counts an image's tokens across them), and the
tower runs once on the whole image. The language model is mlx-vlm's Mistral
on mlx-lm's ``KVCache`` layers (Ministral 3's sliding layers on
``RotatingKVCache`` as mlx-vlm makes them), with plain RoPE positions.
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

_SETTINGS = ("size", "image_mean", "image_std", "do_resize", "do_rescale", "rescale_factor",
             "do_normalize", "do_convert_rgb", "resample")
"""The keys of ``preprocessor_config.json`` mlx-vlm's Pixtral processor takes
(its patch size is the model's patch x merge, as mlx-vlm's processor passes it)."""


class Mistral3Images:
    """The image processor of a Mistral 3 folder (mlx-vlm's Pixtral one, PIL and numpy)."""

    def __init__(self, config: dict[str, Any], *, patch: int, merge: int):
        from mlx_vlm.models.pixtral.image_processing_pixtral import (
            PixtralImageProcessor,
            _size_to_pair,
        )

        self._hf = PixtralImageProcessor(**{k: v for k, v in config.items()
                                            if k in _SETTINGS and v is not None})
        self.patch = patch
        self.unit = patch * merge
        """The side of one token's pixels: the sides are rounded up to it."""
        self.edge = _size_to_pair(self._hf.size)
        hf = self._hf
        self.settings = json.dumps({
            "family": "mistral3", "size": list(self.edge), "patch": patch, "merge": merge,
            "resize": bool(hf.do_resize), "resample": int(hf.resample),
            "rescale": float(hf.rescale_factor) if hf.do_rescale else None,
            "mean": list(hf.image_mean) if hf.do_normalize else None,
            "std": list(hf.image_std) if hf.do_normalize else None}, sort_keys=True)

    def target(self, width: int, height: int) -> tuple[int, int]:
        """The resized image's height and width, as mlx-vlm's processor resizes it."""
        from mlx_vlm.models.pixtral.image_processing_pixtral import (
            get_resize_output_image_size,
        )

        if not self._hf.do_resize:
            return height, width
        return get_resize_output_image_size((height, width), size=self.edge,
                                            patch_size=(self.unit, self.unit))

    def prepare(self, ref: ImageRef) -> PreparedImage:
        """Its rows and columns of tokens from its header alone (no decoding)."""
        header = read_header(Path(ref.path))
        h, w = self.target(header.width, header.height)
        rows, cols = h // self.unit, w // self.unit
        if not rows or not cols:
            raise ImageRefused(f"{ref.name or ref.digest[:12]} is too small for this model "
                               f"({header.width}x{header.height} pixels)")
        return PreparedImage(ref=ref, key=image_key(ref.digest, self.settings),
                             grid=(1, h // self.patch, w // self.patch), merged=(rows, cols))

    def pixels(self, image: PreparedImage) -> np.ndarray:
        """(1, 3, height, width) float32, as mlx-vlm's processor gives them."""
        if image.pixels is None:
            out = self._hf(images=[decode(Path(image.ref.path))])
            height, width = (int(x) for x in out["image_sizes"][0])
            if (height // self.unit, width // self.unit) != image.merged:
                raise ImageRefused(f"{image.ref.name or image.ref.digest[:12]}: the processor "
                                   "sized it otherwise than its header says")
            image.pixels = np.asarray(out["pixel_values"], dtype=np.float32)
        return image.pixels


class Mistral3Family:
    """Mistral Small 3.1 and 3.2 (24B): Pixtral tower, patch merger, rows of tokens."""

    name = "mistral3"
    disk_features = False

    def __init__(self, processor: Mistral3Images, *, image_id: int, row_break: int,
                 end: int):
        self.processor = processor
        self.placeholder_id = image_id
        self._break = row_break
        self._end = end

    def settle(self, vlm: nn.Module) -> None:
        """Compute the tower's 2D RoPE table now: mlx-vlm builds it lazily, out
        of the weights, on the loading thread, and the engine's thread cannot
        evaluate a graph made on another."""
        mx.eval(vlm.vision_tower.vision_model.patch_positional_embedding.inv_freq)

    def span(self, image: PreparedImage) -> list[int]:
        rows, cols = image.merged
        out: list[int] = []
        for r in range(rows):
            out += [image.key] * cols
            out.append(self._break if r < rows - 1 else self._end)
        return out

    def encode(self, vlm: nn.Module, image: PreparedImage) -> mx.array:
        """The whole image's tokens, row by row (the tower runs once)."""
        pixels = mx.array(self.processor.pixels(image))
        sizes = [tuple(pixels.shape[2:])]
        *_, hidden = vlm.vision_tower(pixels.transpose(0, 2, 3, 1), output_hidden_states=True,
                                      image_sizes=sizes)
        feats = hidden[vlm.vision_feature_layer]
        return vlm.multi_modal_projector(feats[0] if feats.ndim == 3 else feats, sizes)

    def forward(self, vlm: nn.Module, ids: mx.array, embeds: mx.array, cache: Any,
                place: list[list[int]], levels: Levels | None = None) -> mx.array:
        return vlm.language_model(ids, inputs_embeds=embeds, cache=cache).logits

    def make_cache(self, vlm: nn.Module) -> list[Any]:
        from mlx_lm.models.cache import KVCache, RotatingKVCache

        window = getattr(vlm.language_model.model, "sliding_window", None)
        return [RotatingKVCache(max_size=window, keep=0)
                if getattr(layer, "use_sliding", False) and window else KVCache()
                for layer in vlm.language_model.layers]


def mistral3_family(folder: Path, config: dict[str, Any], tokenizer: Any) -> Mistral3Family:
    """The family object of a Mistral 3 folder: its processor's settings (the
    patch size and merge of ``config.json``, as mlx-vlm's processor reads them)
    and the ids of the image markers (named in ``processor_config.json``)."""
    pre = read_json(folder, "preprocessor_config.json")
    names = {"image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]"}
    if (folder / "processor_config.json").exists():
        given = read_json(folder, "processor_config.json")
        names = {k: str(given.get(k) or v) for k, v in names.items()}
    patch = int(config["vision_config"].get("patch_size", 14))
    merge = int(config.get("spatial_merge_size", 2))
    ids = {}
    for key, token in names.items():
        found = tokenizer.encode(token, add_special_tokens=False)
        if len(found) != 1:
            from mlxchat.models.errors import ModelError

            raise ModelError(f"the tokenizer in {folder} has no {token} token")
        ids[key] = found[0]
    image_id = int(config.get("image_token_index") or config.get("image_token_id") or 10)
    return Mistral3Family(Mistral3Images(pre, patch=patch, merge=merge), image_id=image_id,
                          row_break=ids["image_break_token"], end=ids["image_end_token"])
