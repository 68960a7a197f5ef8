"""Structured output through the real server: OpenAI's ``response_format``
with the ``openai`` client, Ollama's ``format``, and schemas refused before
any prefill."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from openai import OpenAI

from mlxchat.engine.turn.constrained import SPECULATION_OFF

from tests.server.conftest import request, serve

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer", "minimum": 0, "maximum": 99},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2}},
    "required": ["name", "age", "pets"], "additionalProperties": False}


@pytest.fixture
def roomy(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db", max_tokens=120)
    yield running
    running.stop()


def client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def _format(schema):
    return {"type": "json_schema",
            "json_schema": {"name": "person", "schema": schema, "strict": True}}


def test_every_reply_that_ends_follows_the_schema(roomy):
    api, ended = client(roomy.url), 0
    for i, temperature in enumerate((0.0, 1.0, 1.0, 1.0)):
        reply = api.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": f"Person {i}, as JSON."}],
            temperature=temperature, seed=i, response_format=_format(PERSON))
        choice = reply.choices[0]
        if choice.finish_reason == "stop":
            ended += 1
            jsonschema.validate(json.loads(choice.message.content), PERSON)
    assert ended >= 1


def test_a_constrained_reply_is_in_the_ledger_like_any_other(roomy):
    """The next request, carrying the reply back, prefills only its new message;
    the constrained turn said why speculation was off."""
    api = client(roomy.url)
    messages = [{"role": "user", "content": "A person, as JSON."}]
    first = api.chat.completions.create(model="tiny", messages=messages, temperature=0.0,
                                        response_format=_format(PERSON))
    assert roomy.conv.turns.last_stats.spec_off_reason == SPECULATION_OFF
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "Another."}]
    second = api.chat.completions.create(model="tiny", messages=messages, temperature=0.0,
                                         max_tokens=4)
    stats = roomy.conv.turns.last_stats
    assert stats.spec_off_reason is None
    assert second.usage.prompt_tokens_details.cached_tokens == stats.reused_tokens
    assert stats.reused_tokens == first.usage.prompt_tokens + first.usage.completion_tokens


def test_a_streamed_reply_and_json_object(roomy):
    api = client(roomy.url)
    stream = api.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "JSON please"}], stream=True,
        temperature=0.0, response_format={"type": "json_object"})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.startswith("{")


def test_ollama_format_takes_a_schema_or_json(roomy):
    for fmt, check in ((PERSON, lambda v: jsonschema.validate(v, PERSON)),
                       ("json", lambda v: isinstance(v, dict))):
        reply = request(roomy.url, "POST", "/api/chat", {
            "model": "tiny", "stream": False, "format": fmt, "options": {"temperature": 0},
            "messages": [{"role": "user", "content": "JSON"}]})
        assert reply.status == 200
        body = reply.json()
        text = body["message"]["content"]
        assert text.startswith(("{", "["))
        if body["done_reason"] == "stop":
            check(json.loads(text))


@pytest.mark.parametrize("response_format, words", [
    (_format({"$ref": "#/$defs/nowhere"}), "does not exist"),
    (_format({"type": "string", "pattern": "(unclosed"}), "cannot be compiled"),
    (_format({"type": "object", "properties": {"p": {"type": "strng"}}}), "cannot be compiled"),
    (_format({"type": "object", "properties": {
        f"p{i}": {"type": "string", "pattern": "[a-z]{1,9}" * 2000} for i in range(40)}}),
     "bytes of JSON"),
    ({"type": "xml"}, "Unknown response_format"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": "no"}}, "schema"),
])
def test_a_schema_that_cannot_be_used_is_a_400_before_prefill(roomy, response_format, words):
    api = client(roomy.url)
    prefilled = roomy.conv.engine.cached_tokens
    with pytest.raises(openai.BadRequestError) as caught:
        api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                    response_format=response_format)
    error = caught.value.body
    assert error["param"] == "response_format"
    assert words in error["message"]
    assert roomy.conv.engine.cached_tokens == prefilled  # nothing ran
    assert all(s.message_count == 0 for s in roomy.conv.store.list_sessions())


def test_ollama_refuses_a_bad_format_in_its_own_shape(roomy):
    reply = request(roomy.url, "POST", "/api/chat", {
        "model": "tiny", "format": {"$ref": "#/nope"},
        "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status == 400
    assert "does not exist" in reply.json()["error"]


def test_a_completion_follows_the_schema_too(roomy):
    reply = request(roomy.url, "POST", "/v1/completions", {
        "model": "tiny", "prompt": "JSON:", "max_tokens": 120, "temperature": 0,
        "response_format": _format(PERSON)})
    assert reply.status == 200
    choice = reply.json()["choices"][0]
    assert choice["text"].startswith("{")
    if choice["finish_reason"] == "stop":
        jsonschema.validate(json.loads(choice["text"]), PERSON)
    bad = request(roomy.url, "POST", "/v1/completions", {
        "model": "tiny", "prompt": "JSON:", "response_format": _format({"$ref": "#/x"})})
    assert bad.status == 400 and bad.json()["error"]["param"] == "response_format"
