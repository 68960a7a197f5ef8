"""Qwen2.5-VL, Qwen3-VL and Mistral 3 through the API as Qwen2-VL goes: an OpenAI
image_url part is seen, and the next request reuses the image's span (no
tower call, the whole first exchange counted in cached_tokens)."""

from __future__ import annotations

import pytest

from .conftest import load_for_api, write_family
from .mistral3_models import write_mistral3
from .served import ask_about_image, follow_up_reuses_it, serving


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl", "mistral3"])
def family_vl(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    return load_for_api(write_mistral3(folder) if request.param == "mistral3"
                        else write_family(folder, request.param))


def test_a_family_takes_an_image_and_reuses_it_over_the_api(family_vl, tmp_path, shot):
    with serving(family_vl, tmp_path / "s.db") as served:
        asked = ask_about_image(served, shot)
        assert asked.reply and family_vl.model.vision_calls == 1
        follow_up_reuses_it(served, asked)
        assert family_vl.model.vision_calls == 1
