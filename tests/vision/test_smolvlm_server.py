"""A SmolVLM image through the API, as Qwen2-VL's: an OpenAI image part goes
through the conversation (its tiles computed once), and the next request
reuses its tokens."""

from __future__ import annotations

import pytest

from mlxchat.models import load_folder

from tests.server.conftest import request

from .smolvlm_models import smolvlm_template
from .test_vision_server import data_url, openai, serve, shot  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def tiny_smolvlm(tmp_path_factory):
    from mlxchat.models.testing.smolvlm import write_tiny_smolvlm

    folder = write_tiny_smolvlm(tmp_path_factory.mktemp("smolvlm-api"),
                                chat_template=smolvlm_template())
    return load_folder(folder, name="tiny", spec="tiny", available=None)


def test_a_smolvlm_image_part_is_reused_across_requests(
        tiny_smolvlm, tmp_path, shot):  # noqa: F811
    served = serve(tiny_smolvlm, tmp_path / "s.db")
    model = tiny_smolvlm.model
    try:
        first_user = {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(shot)}},
            {"type": "text", "text": "What is in it?"}]}
        one = request(served.url, "POST", "/v1/chat/completions", openai([first_user]))
        assert one.status == 200, one.body
        reply = one.json()["choices"][0]["message"]["content"]
        first = one.json()["usage"]
        tiles = model.vision_calls
        assert tiles == len(model.known_images()[0].parts) > 1
        two = request(served.url, "POST", "/v1/chat/completions", openai([
            first_user, {"role": "assistant", "content": reply},
            {"role": "user", "content": "And the colours?"}]))
        assert two.status == 200, two.body
        usage = two.json()["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        assert cached == served.conv.turns.last_stats.reused_tokens > first["prompt_tokens"]
        assert usage["prompt_tokens"] - cached == len(served.conv.messages[-2].token_ids)
        assert model.vision_calls == tiles
    finally:
        served.stop()
