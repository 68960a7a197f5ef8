"""Images in the token ledger: a span keyed by the image, reused like any
tokens warm and after a restore; the vision tower runs only for positions no
cache holds; mRoPE positions come back with the restored tokens."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from .conftest import load, mlx_vlm_image_tokens
from .turns import prompt_ids, three_ways

def test_adapter_computes_what_mlx_vlm_computes(vl_folder, images):
    """The whole prompt, and the same fed in chunks that cut the image span,
    give mlx-vlm's own logits (its forward with pixel values and grid), on
    mlx-lm's cache layers and on mlx-vlm's."""
    import mlx_vlm.models.cache as vlm_cache

    loaded = load(vl_folder)
    model = loaded.model
    ids = prompt_ids(loaded, images[:1])
    img = model.know(images[:1])[0]
    assert ids.count(img.key) == img.tokens == mlx_vlm_image_tokens(vl_folder, images[0].path)
    plain = [model.image_token_id if t < 0 else t for t in ids]
    theirs = model.vlm(mx.array(plain)[None], pixel_values=mx.array(model.processor.pixels(img)),
                       image_grid_thw=mx.array([img.grid])).logits
    whole = model(mx.array(ids)[None], cache=make_prompt_cache(model))
    cache = make_prompt_cache(model)
    chunked = mx.concatenate([model(mx.array(ids[a:a + 5])[None], cache=cache)
                              for a in range(0, len(ids), 5)], axis=1)
    on_vlm_layers = model(mx.array(ids)[None], cache=[vlm_cache.KVCache() for _ in model.layers])
    assert mx.array_equal(whole, theirs) and mx.array_equal(on_vlm_layers, theirs)
    # Chunks compute attention in other shapes: the last bits of float32 differ.
    assert mx.allclose(chunked, theirs, atol=1e-5, rtol=0).item()


def test_warm_resumed_and_cold_agree_and_reuse_the_image(vl_folder, images, tmp_path):
    runs = three_ways(vl_folder, images, tmp_path)
    warm = runs["warm"]
    warm_stats, sizes, ledger = warm.stats, warm.sizes, warm.ledger
    # The vision tower runs once per image on one engine, never on a resumed
    # turn except for the new image; cold recomputes every image each turn.
    assert warm.calls == [1, 0, 0, 0, 1, 0]
    assert runs["resumed"].calls == [1, 0, 0, 0, 1, 0]
    assert runs["cold"].calls == [1, 1, 1, 1, 2, 2]
    first, second = sorted({t for t in ledger if t < 0}, key=ledger.index)
    assert warm_stats[0].prefilled_tokens == sizes[0] > ledger.count(first) == (
        mlx_vlm_image_tokens(vl_folder, images[0].path))
    assert sizes[4] > ledger.count(second) == mlx_vlm_image_tokens(vl_folder, images[1].path)
    assert ledger.index(second) > warm_stats[3].context_used
