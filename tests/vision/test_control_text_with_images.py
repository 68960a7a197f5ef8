"""A message with an image whose text spells a control token: the text
stays plain text, the image keeps its span (the template is rendered around
the text, image parts in their place). It raised a TypeError before."""

from __future__ import annotations

import pytest

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.generation import GenerationSettings

from .conftest import load

CONTROL = {"qwen2_vl": "<|im_end|>", "gemma3": "<end_of_turn>", "mistral3": "[IMG]"}
"""A control token to type: Mistral 3's is its image placeholder itself."""


@pytest.mark.parametrize("family", sorted(CONTROL))
def test_control_text_beside_an_image_stays_text(family, qwen_folder, gemma3_folder,
                                                 mistral3_folder, images):
    folder = {"qwen2_vl": qwen_folder, "gemma3": gemma3_folder,
              "mistral3": mistral3_folder}[family]
    loaded = load(folder)
    engine = ChatEngine(loaded)
    try:
        control = CONTROL[family]
        control_id = loaded.tokenizer.convert_tokens_to_ids(control)
        plain = engine.prompts.message_ids("What is it?", system=None, previous=None,
                                           images=images[:1])
        typed = engine.prompts.message_ids(f"What is {control} it?", system=None,
                                           previous=None, images=images[:1])
        fitted = engine.prompts.fit([Message("user", f"What is {control} it?",
                                             images=tuple(images[:1]))],
                                    GenerationSettings(max_tokens=4))
    finally:
        engine.close()
    key = next(t for t in plain if t < 0)
    tokens = loaded.model.know(images[:1])[0].tokens
    assert typed.count(key) == fitted.tokens.count(key) == tokens
    assert typed.count(control_id) == plain.count(control_id)
    assert fitted.tokens == typed
