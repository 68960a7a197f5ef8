"""The fields coding agents (Claude Code) put in a Messages request, each
accepted and honoured: a ``max_tokens`` past what the window leaves (the reply
stops where it is full: ``model_context_window_exceeded``), adaptive thinking
and ``output_config.effort`` (a reasoning budget), ``display: omitted``,
``context_management`` edits of any type, ``?beta=true`` and the
``anthropic-beta`` header, ``metadata.user_id``, ``cache_control`` on every
block, and tools with ``defer_loading`` (left out of the prompt)."""

from __future__ import annotations

import pytest
from anthropic import Anthropic

from mlxchat.server.anthropic.thinking import thinking_settings
from mlxchat.server.core.errors import ApiError
from tests.scripted import Scripted
from tests.server.conftest import real_qwen3, request, serve

HI = [{"role": "user", "content": "Is it sunny?"}]


def _api(url: str) -> Anthropic:
    return Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=60)


def test_max_tokens_past_the_window_stops_where_it_is_full(tiny, tmp_path):
    served = serve(tiny, tmp_path / "s.db", context_window=256)
    try:
        reply = _api(served.url).messages.create(model="tiny", max_tokens=32000, messages=HI,
                                                 extra_body={"temperature": 0})
        assert reply.stop_reason == "model_context_window_exceeded"
        used = reply.usage.input_tokens + reply.usage.cache_read_input_tokens \
            + reply.usage.output_tokens
        assert 256 <= used <= 257  # the window, and the last token (sampled, never fed)
        too_long = request(served.url, "POST", "/v1/messages", {
            "model": "tiny", "max_tokens": 8,
            "messages": [{"role": "user", "content": "word " * 400}]})
        assert too_long.status == 400  # a prompt the window cannot hold is still refused
        assert too_long.json()["error"]["type"] == "invalid_request_error"
    finally:
        served.stop()


def test_effort_and_adaptive_thinking_become_a_reasoning_budget():
    adaptive = {"thinking": {"type": "adaptive", "display": "summarized"}}
    assert thinking_settings(adaptive) == {}  # the model's own choice, its default budget
    for effort, budget in (("low", 1024), ("medium", 4096), ("high", 16384)):
        settings = thinking_settings({**adaptive, "output_config": {"effort": effort}})
        assert settings == {"max_reasoning_tokens": budget, "reasoning_effort": effort}
    top = thinking_settings({"output_config": {"effort": "max"}}, window=32768)
    assert top == {"max_reasoning_tokens": 32768, "reasoning_effort": "high"}
    explicit = thinking_settings({"thinking": {"type": "enabled", "budget_tokens": 99},
                                  "output_config": {"effort": "high"}})
    assert explicit["max_reasoning_tokens"] == 99 and explicit["thinking"] is True
    for bad in ({"thinking": {"type": "sometimes"}},
                {"thinking": {"type": "adaptive", "display": "loud"}},
                {"output_config": {"effort": "extreme"}}, {"output_config": "high"}):
        with pytest.raises(ApiError):
            thinking_settings(bad)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_display_omitted_sends_the_thinking_block_empty(tmp_path, monkeypatch, stream):
    qwen3 = real_qwen3(tmp_path / "qwen3")
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    served = serve(qwen3, tmp_path / "s.db", max_tokens=100)
    try:
        scripted.reply("<think>\nThe sky is clear.\n</think>\n\nYes, sunny.")
        kw = {"model": "tiny", "max_tokens": 100, "messages": HI,
              "thinking": {"type": "adaptive", "display": "omitted"},
              "extra_body": {"output_config": {"effort": "low"}}}
        if stream:
            with _api(served.url).messages.stream(**kw) as events:
                deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
                reply = events.get_final_message()
            assert "thinking_delta" not in deltas
        else:
            reply = _api(served.url).messages.create(**kw)
        thought, said = reply.content
        assert (thought.type, thought.thinking) == ("thinking", "")
        assert said.text == "Yes, sunny."
        assert "The sky is clear." in served.conv.messages[-1].reasoning  # kept all the same
    finally:
        served.stop()


def test_what_agents_add_to_a_request_is_accepted(served):
    cached = {"cache_control": {"type": "ephemeral"}}
    body = {
        "model": "tiny", "max_tokens": 4, "temperature": 0,
        "system": [{"type": "text", "text": "Be brief.", **cached}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather?", **cached}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "", "signature": "x"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Paris"}, **cached}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny.",
                 "is_error": False, **cached}]}],
        "tools": [{"name": "get_weather", "description": "Weather in a city", **cached,
                   "input_schema": {"type": "object",
                                    "properties": {"city": {"type": "string"}}}}],
        "metadata": {"user_id": '{"device_id":"0","session_id":"1"}'},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"},
                                         {"type": "clear_tool_uses_20250919"},
                                         {"type": "a_future_edit_2027"}]},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {"effort": "high"},
    }
    beta = {"anthropic-beta": "claude-code-20250219,context-management-2025-06-27"}
    reply = request(served.url, "POST", "/v1/messages?beta=true", body, headers=beta)
    assert reply.status == 200, reply.body
    assert reply.json()["type"] == "message"
    for bad, field in (({"metadata": {"user_id": 7}}, "metadata.user_id"),
                       ({"context_management": "clear"}, "context_management"),
                       ({"context_management": {"edits": [{"keep": "all"}]}},
                        "context_management")):
        refused = request(served.url, "POST", "/v1/messages?beta=true", {**body, **bad})
        assert refused.status == 400 and field in refused.json()["error"]["message"]


def test_a_deferred_tool_stays_out_of_the_prompt(tmp_path):
    served = serve(real_qwen3(tmp_path / "qwen3"), tmp_path / "s.db")
    try:
        api = _api(served.url)
        schema = {"type": "object", "properties": {"q": {"type": "string"}}}
        one = {"name": "Search", "description": "Search files", "input_schema": schema}
        other = {"name": "WebFetch", "description": "Fetch a page", "input_schema": schema}
        counted = [api.messages.count_tokens(model="tiny", messages=HI, tools=tools)
                   .input_tokens for tools in ([one], [one, other])]
        deferred = api.messages.count_tokens(
            model="tiny", messages=HI, tools=[one, {**other, "defer_loading": True}])
        assert counted[1] > counted[0] == deferred.input_tokens
    finally:
        served.stop()
