"""A Gemma 3 image through the API, as Qwen2-VL's: an OpenAI image part goes
through the conversation, and the next request reuses its tokens."""

from __future__ import annotations

import pytest

from mlxchat.models.testing.gemma3 import write_tiny_gemma3_vl

from .conftest import load_for_api
from .gemma3_models import gemma3_template
from .served import ask_about_image, follow_up_reuses_it, serving


@pytest.fixture(scope="module")
def tiny_gemma3(tmp_path_factory):
    return load_for_api(write_tiny_gemma3_vl(tmp_path_factory.mktemp("g3-api"),
                                             chat_template=gemma3_template()))


def test_a_gemma3_image_part_is_reused_across_requests(tiny_gemma3, tmp_path, shot):
    with serving(tiny_gemma3, tmp_path / "s.db") as served:
        asked = ask_about_image(served, shot)
        assert tiny_gemma3.model.vision_calls == 1
        # The first exchange, its image span of 16 tokens with it, came from the cache.
        follow_up_reuses_it(served, asked)
        assert tiny_gemma3.model.vision_calls == 1
