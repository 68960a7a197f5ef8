"""A Gemma 3 image through the API, as Qwen2-VL's: an OpenAI image part goes
through the conversation, and the next request reuses its tokens."""

from __future__ import annotations

import pytest

from mlxchat.models import load_folder

from tests.server.conftest import request

from .gemma3_models import gemma3_template
from .test_vision_server import data_url, openai, serve, shot  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def tiny_gemma3(tmp_path_factory):
    from mlxchat.models.testing.gemma3 import write_tiny_gemma3_vl

    folder = write_tiny_gemma3_vl(tmp_path_factory.mktemp("g3-api"),
                                  chat_template=gemma3_template())
    return load_folder(folder, name="tiny", spec="tiny", available=None)


def test_a_gemma3_image_part_is_reused_across_requests(tiny_gemma3, tmp_path, shot):  # noqa: F811
    served = serve(tiny_gemma3, tmp_path / "s.db")
    try:
        first_user = {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(shot)}},
            {"type": "text", "text": "What is in it?"}]}
        one = request(served.url, "POST", "/v1/chat/completions", openai([first_user]))
        assert one.status == 200, one.body
        reply = one.json()["choices"][0]["message"]["content"]
        first = one.json()["usage"]
        assert tiny_gemma3.model.vision_calls == 1
        two = request(served.url, "POST", "/v1/chat/completions", openai([
            first_user, {"role": "assistant", "content": reply},
            {"role": "user", "content": "And the colours?"}]))
        assert two.status == 200, two.body
        usage = two.json()["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        # The first exchange, its image span of 16 tokens with it, came from the cache.
        assert cached == served.conv.turns.last_stats.reused_tokens > first["prompt_tokens"]
        assert usage["prompt_tokens"] - cached == len(served.conv.messages[-2].token_ids)
        assert tiny_gemma3.model.vision_calls == 1
    finally:
        served.stop()
