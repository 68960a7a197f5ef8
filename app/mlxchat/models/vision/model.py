"""A vision-language model (mlx-vlm's) driven as the engine drives a text one.

``VisionChat(ids, cache=...)`` takes token ids and returns logits, on mlx-lm's
cache layers (the language models of these families use only ``offset``,
``update_and_fetch`` and ``make_mask``, which mlx-lm's ``KVCache`` and
``RotatingKVCache`` have), so the live cache, trimming, KV segments and their
restore are the text path's. An image's placeholders are its negative key
(``images.image_key``); their embeddings are the vision tower's
features of that image, computed only when a prefill reaches positions no
cache holds, and kept for the next chunk. What differs between families
(image processing, the span's layout, the tower's call, positions, cache
layers) is the ``family``'s (``family``). A family whose tower gives
more than the span's embeddings (Qwen3-VL's DeepStack levels, one row per
token too) has those rows gathered for the positions being fed, beside the
embeddings, and passed to its ``forward``.

Multimodal RoPE (Qwen-VL) places an image's tokens on a grid, so positions
after an image run behind the token count. That state is a function of the
tokens the cache holds and of each image's grid: ``Positions`` keeps it per
position, follows the cache when it is trimmed (a shorter offset), and after a
restore (``follow_tokens``) replays it from the restored tokens' ids, so a
resumed turn places its tokens exactly as the warm one did. An image's tokens
need not be contiguous: text inside its span (Mistral 3's row breaks) leaves
the count of the image's tokens where it was.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn

from mlxchat.chat import ImageRef
from mlxchat.models.vision.family import Levels, VisionFamily
from mlxchat.models.vision.images import ImageRefused, PreparedImage

_KEPT_FEATURES = 4
"""Images whose features are kept after a prefill (a span cut by chunks)."""


class Positions:
    """The mRoPE position of every cached token (three axes), and where the
    next text token goes."""

    def __init__(self) -> None:
        self._tok: list[int] = []
        self._j: list[int] = []
        """Index inside its image span (-1 for text)."""
        self._s: list[int] = []
        """The text position its span starts at (its own for text)."""
        self._next: list[int] = []
        """The position a text token right after it takes."""
        self._last: list[int] = []
        """The index of the last image token at or before it (-1: none): an
        image's tokens may be cut into rows by text (Mistral 3's breaks)."""
        self._pending: list[int] | None = None

    def follow(self, tokens: Sequence[int]) -> None:
        """The cache now holds ``tokens`` (restored): replayed when next asked."""
        self._tok, self._j, self._s, self._next, self._last = [], [], [], [], []
        self._pending = list(tokens)

    def index_in_span(self, i: int) -> int:
        return self._j[i]

    def place(self, row: Sequence[int], offset: int,
              images: dict[int, PreparedImage]) -> list[list[int]]:
        """Positions (3 lists) of ``row`` fed after ``offset`` cached tokens."""
        if self._pending is not None:
            pending, self._pending = self._pending[:offset], None
            self._extend(pending, images)
        if len(self._tok) < offset:
            raise RuntimeError("the positions of the cached tokens are unknown")
        for held in (self._tok, self._j, self._s, self._next, self._last):
            del held[offset:]
        return self._extend(row, images)

    def _extend(self, row: Sequence[int], images: dict[int, PreparedImage]) -> list[list[int]]:
        out: list[list[int]] = [[], [], []]
        nxt = self._next[-1] if self._next else 0
        for t in row:
            if t >= 0:
                j, s, place = -1, nxt, (nxt, nxt, nxt)
                nxt += 1
            else:
                img = images.get(t)
                if img is None:
                    raise ImageRefused("an image of this conversation is not available "
                                       "(its file is gone): it cannot be read again")
                last = self._last[-1] if self._last else -1
                if last >= 0 and self._tok[last] == t and self._j[last] < img.tokens - 1:
                    j, s = self._j[last] + 1, self._s[last]
                else:
                    j, s = 0, nxt
                rows, cols = img.merged
                place = (s + j // (rows * cols), s + (j // cols) % rows, s + j % cols)
                if j == img.tokens - 1:
                    nxt = s + max(img.grid[0], *img.merged)
            for axis in range(3):
                out[axis].append(place[axis])
            self._tok.append(t)
            self._j.append(j)
            self._s.append(s)
            self._next.append(nxt)
            self._last.append(len(self._tok) - 1 if t < 0 else
                              (self._last[-1] if self._last else -1))
        return out


class _State:
    """What the adapter keeps beside its weights (a plain object, so MLX's
    module tree never takes it for parameters)."""

    def __init__(self) -> None:
        self.images: dict[int, PreparedImage] = {}
        self.features: OrderedDict[int, tuple[mx.array, ...]] = OrderedDict()
        """The tower's outputs per image key: the span's embeddings first."""
        self.early: dict[int, tuple[mx.array, ...]] = {}
        """Those of the images going with the next message, computed when they
        were attached (``hold_early``) and kept until a prefill takes them."""
        self.positions: weakref.WeakKeyDictionary[Any, Positions] = weakref.WeakKeyDictionary()
        """Per cache (keyed by its first layer): several caches share one model
        (the chat's and the API's engines, a probe's throwaway cache)."""
        self.vision_calls = 0
        self.store: Any = None
        """Where features are kept on disk (``features.FeatureStore``), if anywhere."""

    def positions_of(self, cache: Any, offset: int) -> Positions:
        first = cache[0] if cache else None
        if first is None:
            return Positions()
        found = self.positions.get(first)
        if found is None:
            if offset:
                raise RuntimeError("a cache holding tokens this model never placed")
            found = self.positions[first] = Positions()
        return found


class VisionChat(nn.Module):
    """mlx-vlm's model behind the text model's call: ``model(ids, cache=layers)``."""

    sees_images = True

    def __init__(self, vlm: nn.Module, family: VisionFamily):
        super().__init__()
        self.vlm = vlm
        self.family = family
        self.processor = family.processor
        self.image_token_id = family.placeholder_id
        self._state = _State()

    def make_cache(self) -> list[Any]:
        return self.family.make_cache(self.vlm)

    @property
    def layers(self) -> list[Any]:
        return self.vlm.language_model.layers

    @property
    def vision_calls(self) -> int:
        """How often the vision tower ran (tests count it)."""
        return self._state.vision_calls

    # -- images -------------------------------------------------------------------------
    def know(self, refs: Sequence[ImageRef]) -> list[PreparedImage]:
        """Prepare (from the header only) and remember the images ``refs``."""
        out = []
        for ref in refs:
            found = next((p for p in self._state.images.values() if p.ref == ref), None)
            if found is None:
                found = self.processor.prepare(ref)
                self._state.images[found.key] = found
                for part in getattr(found, "parts", ()):  # SmolVLM's tiles: a span each
                    self._state.images[part.key] = part
            out.append(found)
        return out

    def known_images(self) -> list[PreparedImage]:
        return list(self._state.images.values())

    def expand(self, ids: Sequence[int], refs: Sequence[ImageRef]) -> list[int]:
        """``ids`` with the k-th image placeholder the template wrote replaced
        by the k-th image's span (its key, once per token it takes)."""
        images = iter(self.know(refs))
        out: list[int] = []
        for t in ids:
            if t == self.image_token_id:
                img = next(images, None)
                if img is None:
                    raise ImageRefused("the chat template wrote more images than were given")
                out.extend(self.family.span(img))
            else:
                out.append(t)
        if next(images, None) is not None:
            raise ImageRefused("this model's chat template left an image out")
        return out

    def follow_tokens(self, cache: Sequence[Any], tokens: Sequence[int]) -> None:
        """``cache`` (new layer objects: a restore, a quantized copy) holds ``tokens``."""
        if cache:
            positions = self._state.positions[cache[0]] = Positions()
            positions.follow(tokens)

    def keep_features_in(self, store: Any) -> None:
        """Keep every image's features in ``store`` too, and look there first."""
        self._state.store = store

    def hold_early(self, refs: Sequence[ImageRef]) -> int:
        """Compute now the features of ``refs`` (the images going with the
        next message, all of them), so the prefill that shows them runs no
        tower; forget those held for other images. Returns the tower calls made."""
        state = self._state
        before = state.vision_calls
        keys = [k for img in self.know(refs)
                for k in dict.fromkeys(t for t in self.family.span(img) if t < 0)]
        for key in [k for k in state.early if k not in keys]:
            del state.early[key]
        for key in keys:
            if key not in state.early:
                state.early[key] = state.features.get(key) or self._computed(key)
        return state.vision_calls - before

    def _features(self, key: int) -> tuple[mx.array, ...]:
        """The image's embeddings, then any further outputs of its family's
        ``encode`` (one row per token each): memory, disk, or the tower."""
        state = self._state
        if key in state.features:
            state.features.move_to_end(key)
            return state.features[key]
        feats = state.early.pop(key, None) or self._computed(key)
        state.features[key] = feats
        while len(state.features) > _KEPT_FEATURES:
            state.features.popitem(last=False)
        return feats

    def _computed(self, key: int) -> tuple[mx.array, ...]:
        """The image's features from disk, or from the tower (then kept on disk)."""
        state = self._state
        feats = state.store.get(key) if state.store is not None else None
        if feats is None:
            out = self.family.encode(self.vlm, state.images[key])
            feats = out if isinstance(out, tuple) else (out,)
            mx.eval(feats)
            state.vision_calls += 1
            if state.store is not None:
                state.store.put(key, feats)
        return feats

    # -- the call -----------------------------------------------------------------------
    def _embeddings(self, row: list[int], offset: int, positions: Positions
                    ) -> tuple[mx.array, Levels | None]:
        """Text ids through the embedding table, image spans as their features;
        and the further outputs' rows at the row's image positions, if any."""
        lm = self.vlm.language_model
        embed = getattr(lm, "model", lm).embed_tokens  # Idefics3's has no inner model
        dtype = embed.weight.dtype
        pieces, levels, i = [], [], 0
        while i < len(row):
            k = i
            if row[i] >= 0:
                while k < len(row) and row[k] >= 0:
                    k += 1
                pieces.append(embed(mx.array(row[i:k])))
            else:
                while k < len(row) and row[k] == row[i]:
                    k += 1
                j0 = positions.index_in_span(offset + i)
                first, *more = (f[j0:j0 + (k - i)].astype(dtype) for f in self._features(row[i]))
                pieces.append(first)
                levels = levels or [[] for _ in more]
                for held, rows in zip(levels, more):
                    held.append(rows)
            i = k
        embeds = mx.concatenate(pieces, axis=0)[None] if len(pieces) > 1 else pieces[0][None]
        if not levels:
            return embeds, None
        return embeds, Levels(mx.array([[t < 0 for t in row]]),
                              [mx.concatenate(held, axis=0) for held in levels])

    def __call__(self, inputs: mx.array, cache: Any = None, **kwargs: Any) -> mx.array:
        row = [int(t) for t in inputs[0].tolist()]
        offset = int(cache[0].offset) if cache and cache[0] is not None else 0
        state = self._state
        positions = state.positions_of(cache, offset)
        place = positions.place(row, offset, state.images)
        embeds, levels = self._embeddings(row, offset, positions)
        text_ids = mx.maximum(inputs, 0)
        return self.family.forward(self.vlm, text_ids, embeds, cache, place, levels)
