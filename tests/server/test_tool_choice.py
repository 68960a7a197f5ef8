"""Tool calls held to their tools by the grammar (llguidance), on a tiny random
Qwen3 speaking through Qwen3's real template: ``tool_choice`` any / a named
tool (Anthropic) and "required" / a named function (OpenAI) make the reply
one call whose input follows the tool's ``input_schema``; with the model
choosing, a call it opens is held to its schema while its text stays free;
what cannot be held is a 400 before any prefill, with nothing stored."""

from __future__ import annotations

import json

import jsonschema
import mlx.core as mx
import pytest
from anthropic import Anthropic
from openai import OpenAI

from mlxchat.engine.turn import decode

from tests.server.conftest import real_qwen3, request, serve

CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]},
                                         "metric": {"type": "boolean"}},
        "required": ["city", "metric"], "additionalProperties": False}
"""An input schema whose every call is finite: a random model cannot ramble in it."""
WEATHER = {"name": "get_weather", "description": "Weather in a city", "input_schema": CITY}
TIME = {"name": "get_time", "description": "Time in a city", "input_schema": {
    "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
    "additionalProperties": False}}
SCHEMAS = {t["name"]: t["input_schema"] for t in (WEATHER, TIME)}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def _openai_tool(tool: dict) -> dict:
    return {"type": "function", "function": {"name": tool["name"],
                                             "parameters": tool["input_schema"]}}


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return real_qwen3(tmp_path_factory.mktemp("qwen3-choice"))


@pytest.fixture
def served(qwen3, tmp_path):
    running = serve(qwen3, tmp_path / "s.db", max_tokens=300)
    yield running
    running.stop()


def _anthropic(served) -> Anthropic:
    return Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=120)


def _valid_uses(reply) -> list:
    uses = [b for b in reply.content if b.type == "tool_use"]
    for use in uses:
        jsonschema.validate(use.input, SCHEMAS[use.name])
    return uses


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_anthropic_tool_choice_makes_the_reply_one_call_that_follows_its_schema(served,
                                                                                 stream):
    api = _anthropic(served)
    for choice, names in (({"type": "tool", "name": "get_time"}, {"get_time"}),
                          ({"type": "any"}, {"get_weather", "get_time"})):
        kw = dict(model="tiny", max_tokens=300, messages=ASK, tools=[WEATHER, TIME],
                  tool_choice=choice, extra_body={"temperature": 1.0, "seed": 3})
        if stream:
            with api.messages.stream(**kw) as events:
                reply = events.get_final_message()
        else:
            reply = api.messages.create(**kw)
        assert reply.stop_reason == "tool_use", reply
        (use,) = _valid_uses(reply)
        assert use.name in names
        assert [b.type for b in reply.content] == ["tool_use"]
        assert served.conv.messages[-1].tool_calls[0].arguments == use.input


def test_openai_required_and_a_named_function_make_the_reply_one_valid_call(served):
    api = OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=120)
    tools = [_openai_tool(WEATHER), _openai_tool(TIME)]
    for choice, names in (({"type": "function", "function": {"name": "get_weather"}},
                           {"get_weather"}), ("required", {"get_weather", "get_time"})):
        reply = api.chat.completions.create(model="tiny", max_tokens=300, messages=ASK,
                                            tools=tools, tool_choice=choice, temperature=1.0,
                                            seed=5)
        choice_out = reply.choices[0]
        assert choice_out.finish_reason == "tool_calls"
        (call,) = choice_out.message.tool_calls
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


class _ByPosition:
    """The reply steered to ``text`` token by token by position (then the end
    token): where the grammar overrides a token the script goes on from
    the next position, so the reply still ends."""

    def __init__(self, tokenizer, monkeypatch, text: str):
        self.ids = tokenizer.encode(text, add_special_tokens=False) \
            + [tokenizer.get_vocab()["<|im_end|>"]]
        self.start: int | None = None
        real = decode.sampling
        monkeypatch.setattr(decode, "sampling", lambda settings, **kw: {
            **real(settings, **kw), "processors": [self._force]})

    def _force(self, tokens, logits):
        if self.start is None:
            self.start = tokens.shape[-1]
        at = min(tokens.shape[-1] - self.start, len(self.ids) - 1)
        return mx.where(mx.arange(logits.shape[-1]) == self.ids[at], 0.0, -1e9) + 0 * logits


def test_a_call_the_model_opens_is_held_to_its_schema_and_its_text_stays_free(qwen3, served,
                                                                            monkeypatch):
    # The model means a call its tool's schema refuses: a number for the city.
    _ByPosition(qwen3.tokenizer, monkeypatch, 'Let me check.\n<tool_call>\n{"name": '
                '"get_weather", "arguments": {"city": 5, "metric": true}}\n</tool_call>')
    reply = _anthropic(served).messages.create(model="tiny", max_tokens=300, messages=ASK,
                                               tools=[WEATHER, TIME],
                                               extra_body={"temperature": 0})
    assert reply.content[0].type == "text" and reply.content[0].text == "Let me check.\n"
    (use,) = _valid_uses(reply)
    assert use.name == "get_weather" and use.input["city"] in ("Paris", "Rome")


def test_what_cannot_be_held_is_a_400_before_any_prefill_with_nothing_stored(served):
    base = {"model": "tiny", "max_tokens": 8, "messages": ASK}
    for bad, said in (({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}},
                       "'nope', which is not one of the tools"),
                      ({"tool_choice": {"type": "any"}}, "gives no tools"),
                      ({"tools": [WEATHER], "tool_choice": {"type": "tool"}}, "'tool_choice'"),
                      ({"tools": [WEATHER], "tool_choice": {"type": "any"},
                        "thinking": {"type": "enabled", "budget_tokens": 64}}, "Thinking"),
                      ({"tools": [WEATHER], "tool_choice": {"type": "any"}, "output_config": {
                          "format": {"type": "json_schema", "schema": CITY}}}, "both")):
        got = request(served.url, "POST", "/v1/messages", {**base, **bad})
        assert got.status == 400 and got.json()["type"] == "error", (bad, got.body)
        assert said in got.json()["error"]["message"], (bad, got.body)
    openai = {"model": "tiny", "max_tokens": 8, "messages": ASK,
              "tools": [_openai_tool(WEATHER)]}
    for choice in ("always", {"type": "function"}, {"type": "function",
                                                    "function": {"name": "nope"}}):
        got = request(served.url, "POST", "/v1/chat/completions", {**openai,
                                                                   "tool_choice": choice})
        assert got.status == 400 and got.json()["error"]["param"] == "tool_choice", choice
    assert all(s.message_count == 0 for s in served.conv.store.list_sessions())
    assert served.conv.turns.last_stats is None  # nothing was prefilled
