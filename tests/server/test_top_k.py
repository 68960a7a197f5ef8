"""``top_k`` as clients send it: in Anthropic's body (the SDK's ``extra_body``),
OpenAI's body and Ollama's ``options``. With ``top_k`` 1 only the likeliest
token can be drawn, so a hot sampler writes the greedy reply."""

from __future__ import annotations

from anthropic import Anthropic
from openai import OpenAI

from tests.server.conftest import request

HOT = {"temperature": 2.0, "seed": 7}
"""A sampler that, left free, wanders far from the greedy reply on a random model."""
ASK = [{"role": "user", "content": "Say something long."}]


def _anthropic(served, **body) -> str:
    api = Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=60)
    reply = api.messages.create(model="tiny", max_tokens=8, messages=ASK, extra_body=body)
    return "".join(b.text for b in reply.content if b.type == "text")


def _openai(served, **body) -> str:
    api = OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60)
    reply = api.chat.completions.create(model="tiny", max_tokens=8, messages=ASK,
                                        extra_body=body)
    return reply.choices[0].message.content or ""


def _ollama(served, **options) -> str:
    got = request(served.url, "POST", "/api/chat", {
        "model": "tiny", "messages": ASK, "stream": False,
        "options": {"num_predict": 8, **options}})
    assert got.status == 200, got.body
    return got.json()["message"]["content"]


def test_top_k_one_makes_a_hot_sampler_greedy_on_every_api(served):
    for ask in (_anthropic, _openai, _ollama):
        greedy = ask(served, temperature=0)
        assert ask(served, **HOT) != greedy, ask.__name__  # the hot sampler does wander
        assert ask(served, **HOT, top_k=1) == greedy, ask.__name__


def test_a_top_k_past_the_vocabulary_cuts_nothing(served):
    """A whole number is taken whatever its size: one at or past the vocabulary
    (mlx-lm's sampler raises on it, mid-turn) samples as without a top_k."""
    for ask in (_openai, _ollama):  # the two that take a seed
        assert ask(served, **HOT, top_k=10**9) == ask(served, **HOT), ask.__name__
    assert _anthropic(served, **HOT, top_k=10**9)  # answered (mlx-lm raised mid-turn)


def test_a_bad_top_k_is_refused_with_nothing_stored(served):
    for bad in (-1, 1.5, "3", True):
        got = request(served.url, "POST", "/v1/chat/completions", {
            "model": "tiny", "messages": ASK, "top_k": bad})
        assert got.status == 400 and got.json()["error"]["param"] == "top_k", bad
        got = request(served.url, "POST", "/v1/messages", {
            "model": "tiny", "max_tokens": 4, "messages": ASK, "top_k": bad})
        assert got.status == 400 and got.json()["type"] == "error", bad
    assert all(s.message_count == 0 for s in served.conv.store.list_sessions())
