"""A model that sees no images refuses a message with one, in one line."""

from __future__ import annotations

import pytest

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.prompt.images import ImagesRefused
from mlxchat.generation import GenerationSettings


def test_a_text_model_refuses_an_image_in_one_line(tiny, images):
    engine = ChatEngine(tiny)
    try:
        assert not tiny.info.sees_images
        with pytest.raises(ImagesRefused) as got:
            engine.prompts.message_ids("What is it?", system=None, previous=None,
                                       images=images[:1])
        assert "\n" not in str(got.value) and "sees no images" in str(got.value)
        with pytest.raises(ImagesRefused):
            list(engine.turn([Message("user", "What?", images=images[:1])],
                             GenerationSettings(max_tokens=2)))
        assert engine.cached_tokens == []
    finally:
        engine.close()


def test_a_vlm_family_not_driven_loads_text_only_as_before(tmp_path):
    """A Llama 4 folder with a vision tower still loads through mlx-lm (its
    text model) and sees no images, as before mlx-vlm was installed."""
    import json

    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model
    from mlxchat.models.vision.load import is_vision_config

    folder = write_tiny_model(tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    assert not is_vision_config({**config, "model_type": "llama4", "vision_config": {"x": 1}})
    assert is_vision_config({"model_type": "mistral3", "vision_config": {"patch_size": 14}})
    assert is_vision_config({"model_type": "qwen2_vl", "vision_config": {"depth": 1}})
    assert is_vision_config({"model_type": "gemma3", "vision_config": {"patch_size": 14}})
    (folder / "config.json").write_text(json.dumps({**config, "vision_config": {"depth": 1}}))
    loaded = load_folder(folder, available=None)
    assert not loaded.info.sees_images
