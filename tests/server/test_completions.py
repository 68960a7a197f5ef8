"""``POST /v1/completions``: a raw prompt through the engine, no template and
no session; whole and streamed agree, stop strings cut, and the chat session
it displaced still reuses its whole branch on its next turn."""

from __future__ import annotations

import json

from openai import OpenAI

from tests.server.conftest import request


def test_a_raw_prompt_is_completed_whole_and_streamed(served):
    api = OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60)
    sessions_before = len(served.conv.store.list_sessions())
    whole = api.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6,
                                   temperature=0)
    tokens = served.conv.engine.loaded.tokenizer.encode("Once upon a time")
    assert whole.usage.prompt_tokens == len(tokens)
    assert whole.usage.completion_tokens == 6 and whole.choices[0].finish_reason == "length"
    text = whole.choices[0].text
    assert text
    streamed = list(api.completions.create(model="tiny", prompt="Once upon a time",
                                           max_tokens=6, temperature=0, stream=True,
                                           stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == text
    assert streamed[-1].usage.completion_tokens == 6
    # The same prompt again: the engine's cache supplies it (less the last token).
    assert streamed[-1].usage.prompt_tokens_details.cached_tokens >= len(tokens) - 1
    stop = text[2:4]
    cut = api.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6,
                                 temperature=0, stop=[stop])
    assert cut.choices[0].text == text[:text.find(stop)]
    assert cut.choices[0].finish_reason == "stop"
    assert len(served.conv.store.list_sessions()) == sessions_before  # nothing stored


def test_a_chat_after_a_completion_reuses_its_branch(served):
    api = OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "Hello there"}]
    first = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                        max_tokens=4)
    api.completions.create(model="tiny", prompt="Something else entirely", max_tokens=4)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "More"}]
    second = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                         max_tokens=4)
    assert second.usage.prompt_tokens_details.cached_tokens \
        == first.usage.prompt_tokens + first.usage.completion_tokens


def test_bad_completion_requests_name_the_field(served):
    for body, param in (({"model": "tiny"}, "prompt"),
                        ({"model": "tiny", "prompt": ""}, "prompt"),
                        ({"model": "tiny", "prompt": "x", "echo": 1}, "echo"),
                        ({"model": "tiny", "prompt": "x", "n": 2, "best_of": 1}, "best_of"),
                        ({"model": "tiny", "prompt": [1, "x"]}, "prompt"),
                        ({"model": "tiny", "prompt": "x", "logprobs": 21}, "logprobs"),
                        ({"model": "tiny", "prompt": "x", "max_tokens": 0}, "max_tokens"),
                        ({"prompt": "x"}, "model")):
        reply = request(served.url, "POST", "/v1/completions", body)
        assert reply.status == 400, body
        assert reply.json()["error"]["param"] == param
    unknown = request(served.url, "POST", "/v1/completions", {"model": "nope", "prompt": "x"})
    assert unknown.status == 404
    long = request(served.url, "POST", "/v1/completions",
                   {"model": "tiny", "prompt": "word " * 5000})
    assert long.status == 400
    assert json.loads(long.body)["error"]["code"] == "context_length_exceeded"
