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
