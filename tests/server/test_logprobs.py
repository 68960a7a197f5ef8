"""Log-probabilities on ``/v1/chat/completions`` (OpenAI's ``choices[].logprobs.
content``, whole and streamed) and ``/v1/completions`` (the legacy shape, an
echoed prompt's too): read through the ``openai`` SDK's own types, each the
model's own log-softmax recomputed here from the prompt."""

from __future__ import annotations

import json
import math

import mlx.core as mx
import numpy as np
import pytest
from openai import OpenAI

from mlxchat.chat import Message
from mlxchat.engine.prompt.render import render

from tests.server.conftest import request

ASK = [{"role": "user", "content": "Tell me about rivers."}]


def _api(served) -> OpenAI:
    return OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60)


def _first_distribution(loaded, ids: list[int]) -> np.ndarray:
    logits = loaded.model(mx.array(ids)[None])[0, -1].astype(mx.float32)
    return np.array(logits - mx.logsumexp(logits))


def test_chat_logprobs_are_the_model_s_own(served, tiny):
    reply = _api(served).chat.completions.create(model="tiny", messages=ASK, logprobs=True,
                                                 top_logprobs=3, max_tokens=6, temperature=0)
    content = reply.choices[0].logprobs.content
    assert "".join(t.token for t in content) == reply.choices[0].message.content
    expected = _first_distribution(tiny, render(tiny.tokenizer, [Message("user", ASK[0][
        "content"])]))
    first = content[0]
    assert first.logprob == pytest.approx(float(expected.max()), abs=1e-4)  # greedy
    assert [t.logprob for t in first.top_logprobs] == pytest.approx(
        sorted(expected, reverse=True)[:3], abs=1e-4)
    assert bytes(first.bytes).decode() == first.token
    assert all(len(t.top_logprobs) == 3 for t in content)


def test_streamed_chat_logprobs_match_the_whole_reply(served):
    api = _api(served)
    whole = api.chat.completions.create(model="tiny", messages=ASK, logprobs=True,
                                        top_logprobs=1, max_tokens=6, temperature=0)
    chunks = list(api.chat.completions.create(model="tiny", messages=ASK, logprobs=True,
                                              top_logprobs=1, max_tokens=6, temperature=0,
                                              stream=True))
    streamed = [t for c in chunks for ch in c.choices if ch.logprobs
                for t in ch.logprobs.content]
    assert [(t.token, round(t.logprob, 4)) for t in streamed] \
        == [(t.token, round(t.logprob, 4)) for t in whole.choices[0].logprobs.content]
    for chunk in chunks:  # a chunk's figures are its own text's
        for ch in chunk.choices:
            if ch.logprobs:
                assert "".join(t.token for t in ch.logprobs.content) == ch.delta.content


def test_every_choice_says_logprobs_null_when_not_asked(served):
    whole = request(served.url, "POST", "/v1/chat/completions",
                    {"model": "tiny", "messages": ASK, "max_tokens": 3})
    assert whole.json()["choices"][0]["logprobs"] is None
    streamed = request(served.url, "POST", "/v1/chat/completions",
                       {"model": "tiny", "messages": ASK, "max_tokens": 3, "stream": True})
    chunks = [json.loads(line[6:]) for line in streamed.lines()
              if line.startswith("data: {")]
    assert chunks and all("logprobs" in c["choices"][0] and c["choices"][0]["logprobs"] is None
                          for c in chunks if c["choices"])


def test_chat_logprob_fields_are_checked(served):
    for body, param in (({"logprobs": "yes"}, "logprobs"),
                        ({"top_logprobs": 2}, "top_logprobs"),
                        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs")):
        reply = request(served.url, "POST", "/v1/chat/completions",
                        {"model": "tiny", "messages": ASK, **body})
        assert reply.status == 400, body
        assert reply.json()["error"]["param"] == param


def test_completion_logprobs_in_the_legacy_shape(served, tiny):
    api = _api(served)
    reply = api.completions.create(model="tiny", prompt="Once upon a time", max_tokens=5,
                                   temperature=0, logprobs=2)
    figures = reply.choices[0].logprobs
    assert "".join(figures.tokens) == reply.choices[0].text
    assert figures.text_offset == [sum(len(t) for t in figures.tokens[:i])
                                   for i in range(len(figures.tokens))]
    expected = _first_distribution(tiny, list(tiny.tokenizer.encode("Once upon a time")))
    assert figures.token_logprobs[0] == pytest.approx(float(expected.max()), abs=1e-4)
    assert all(len(top) == 2 for top in figures.top_logprobs)


def test_echo_gives_the_prompt_and_its_logprobs_first_null(served, tiny):
    api = _api(served)
    prompt = "Once upon a time"
    ids = list(tiny.tokenizer.encode(prompt))
    reply = api.completions.create(model="tiny", prompt=prompt, max_tokens=3, temperature=0,
                                   echo=True, logprobs=1)
    choice = reply.choices[0]
    assert choice.text.startswith(prompt)
    figures = choice.logprobs
    assert len(figures.tokens) == len(ids) + 3
    assert figures.token_logprobs[0] is None and figures.top_logprobs[0] is None
    assert "".join(figures.tokens) == choice.text
    logits = tiny.model(mx.array(ids)[None])[0].astype(mx.float32)
    lp = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
    for i in range(1, len(ids)):
        assert figures.token_logprobs[i] == pytest.approx(float(lp[i - 1, ids[i]]), abs=1e-4)
    # max_tokens 0 with echo scores the prompt alone (lm-eval's loglikelihood).
    scored = api.completions.create(model="tiny", prompt=prompt, max_tokens=0, echo=True,
                                    logprobs=0)
    assert scored.choices[0].text == prompt and scored.usage.completion_tokens == 0
    assert scored.choices[0].logprobs.token_logprobs == figures.token_logprobs[:len(ids)]
    assert math.isfinite(sum(scored.choices[0].logprobs.token_logprobs[1:]))


def test_streamed_echo_says_the_prompt_first(served):
    chunks = list(_api(served).completions.create(
        model="tiny", prompt="Once upon a time", max_tokens=3, temperature=0, echo=True,
        stream=True))
    assert chunks[0].choices[0].text == "Once upon a time"
