"""Qwen3-VL's DeepStack levels travel with the image's features: kept by the
image's key in memory and, when a store is attached, on disk, so a prompt
that must compute the span again without the tower gets the same logits."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.engine.core import ChatEngine
from mlxchat.models.vision.features import FeatureStore

from .conftest import load, write_family


def test_features_from_disk_carry_the_deepstack_levels(images, tmp_path):
    folder = write_family(tmp_path / "qwen3", "qwen3_vl")
    loaded = load(folder)
    engine = ChatEngine(loaded)
    ids = engine.prompts.message_ids("What is it?", system=None, previous=None,
                                     images=images[:1])
    engine.close()
    tower = loaded.model
    assert not getattr(tower.family, "disk_features", False)  # off by default, as Qwen2-VL
    store = FeatureStore("qwen3", root=tmp_path / "features")
    tower.keep_features_in(store)
    key = tower.know(images[:1])[0].key
    want = tower(mx.array(ids)[None], cache=make_prompt_cache(tower))
    assert tower.vision_calls == 1
    kept = store.get(key)
    levels = len(tower.vlm.config.vision_config.deepstack_visual_indexes)
    assert kept is not None and len(kept) == 1 + levels > 1

    from_disk = load(folder).model
    from_disk.keep_features_in(store)
    from_disk.know(images[:1])
    got = from_disk(mx.array(ids)[None], cache=make_prompt_cache(from_disk))
    assert from_disk.vision_calls == 0
    assert mx.array_equal(got, want)
