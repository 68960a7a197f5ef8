"""Qwen2.5-VL, Qwen3-VL and Mistral 3 through the API as Qwen2-VL goes: an OpenAI
image_url part is seen, and the next request reuses the image's span (no
tower call, the whole first exchange counted in cached_tokens)."""

from __future__ import annotations

import pytest

from mlxchat.models import load_folder

from tests.server.conftest import request

from .conftest import write_family
from .mistral3_models import write_mistral3
from .test_vision_server import data_url, openai, serve, shot  # noqa: F401 (fixture)


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl", "mistral3"])
def family_vl(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    folder = (write_mistral3(folder) if request.param == "mistral3"
              else write_family(folder, request.param))
    return load_folder(folder, name="tiny", spec="tiny", available=None)


def test_a_family_takes_an_image_and_reuses_it_over_the_api(family_vl, tmp_path, shot):
    served = serve(family_vl, tmp_path / "s.db")
    try:
        first_user = {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(shot)}},
            {"type": "text", "text": "What is in it?"}]}
        one = request(served.url, "POST", "/v1/chat/completions", openai([first_user]))
        assert one.status == 200, one.body
        reply = one.json()["choices"][0]["message"]["content"]
        assert reply and family_vl.model.vision_calls == 1
        two = request(served.url, "POST", "/v1/chat/completions", openai([
            first_user, {"role": "assistant", "content": reply},
            {"role": "user", "content": "And the colours?"}]))
        assert two.status == 200, two.body
        usage = two.json()["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        assert cached == served.conv.turns.last_stats.reused_tokens > one.json()["usage"][
            "prompt_tokens"]
        assert usage["prompt_tokens"] - cached == len(served.conv.messages[-2].token_ids)
        assert family_vl.model.vision_calls == 1
    finally:
        served.stop()
