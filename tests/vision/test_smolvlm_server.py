"""A SmolVLM image through the API, as Qwen2-VL's: an OpenAI image part goes
through the conversation (its tiles computed once), and the next request
reuses its tokens."""

from __future__ import annotations

import pytest

from mlxchat.models.testing.smolvlm import write_tiny_smolvlm

from .conftest import load_for_api
from .served import ask_about_image, follow_up_reuses_it, serving
from .smolvlm_models import smolvlm_template


@pytest.fixture(scope="module")
def tiny_smolvlm(tmp_path_factory):
    return load_for_api(write_tiny_smolvlm(tmp_path_factory.mktemp("smolvlm-api"),
                                           chat_template=smolvlm_template()))


def test_a_smolvlm_image_part_is_reused_across_requests(tiny_smolvlm, tmp_path, shot):
    model = tiny_smolvlm.model
    with serving(tiny_smolvlm, tmp_path / "s.db") as served:
        asked = ask_about_image(served, shot)
        tiles = model.vision_calls
        assert tiles == len(model.known_images()[0].parts) > 1
        follow_up_reuses_it(served, asked)
        assert model.vision_calls == tiles
