"""Qwen3-VL on the engine: DeepStack beside the span's embeddings.

Qwen3-VL's vision tower returns, with an image's embeddings, one array per
DeepStack level (features of early tower blocks, merged as the span's tokens
are); the language model adds level ``i`` to the hidden states at the image's
positions after its layer ``i``. They enter nothing but the prefill of the
image's own positions: the KV those layers write already holds them, so a
restored or reused span needs neither them nor the tower. They are kept with
the image's embeddings, by its key, so a prefill cut into chunks adds each
chunk's rows; only a prefill that reaches an uncached image runs the tower.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from mlxchat.models.vision_model import Positions, VisionChat


class DeepStackChat(VisionChat):
    """``VisionChat`` for Qwen3-VL: the tower's DeepStack levels travel with
    the span and are added at the image's positions in the first layers."""

    def _tower(self, pixels: mx.array, grid: tuple[int, int, int]) -> tuple[mx.array, ...]:
        feats, levels = self.vlm.vision_tower(pixels, mx.array([grid]))
        return (feats, *levels)

    def _extra_inputs(self, row: list[int], offset: int, positions: Positions) -> dict[str, Any]:
        """The image positions of ``row`` and, per DeepStack level, their rows
        (in the order the positions come), or nothing for a text-only row."""
        levels: list[list[mx.array]] = []
        i = 0
        while i < len(row):
            if row[i] >= 0:
                i += 1
                continue
            k = i
            while k < len(row) and row[k] == row[i]:
                k += 1
            j0 = positions.index_in_span(offset + i)
            outputs = self._features(row[i])[1:]
            if not levels:
                levels = [[] for _ in outputs]
            for held, level in zip(levels, outputs):
                held.append(level[j0:j0 + (k - i)])
            i = k
        if not levels or not levels[0]:
            return {}
        dtype = self.vlm.language_model.model.embed_tokens.weight.dtype
        return {"visual_pos_masks": mx.array([[t < 0 for t in row]]),
                "deepstack_visual_embeds": [mx.concatenate(held, axis=0).astype(dtype)
                                            for held in levels]}
