"""A client's tool loop through Anthropic's Messages API on Qwen3's real
template, with the ``anthropic`` SDK: the model's call markup comes back as
``tool_use`` blocks (streamed as ``input_json_delta``), the ``tool_result``
blocks sent back render as the template's tool messages, and the loop finds
its stored branch so each step prefills only what it adds."""

from __future__ import annotations

import pytest
from anthropic import Anthropic

from tests.scripted import Scripted
from tests.server.conftest import real_qwen3, serve
from tests.server.test_tool_loop import CALLING

WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
"""The tool as Anthropic's clients define it."""


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return real_qwen3(tmp_path_factory.mktemp("qwen3-anthropic"))


@pytest.fixture
def served(qwen3, tmp_path):
    running = serve(qwen3, tmp_path / "s.db", max_tokens=200)
    yield running
    running.stop()


def _ask(api: Anthropic, messages: list, *, stream: bool = False, **kw):
    """The reply as the client gets it (put together from a stream, or whole)."""
    kw = {"model": "tiny", "max_tokens": 200, "messages": messages, "tools": [WEATHER],
          "extra_body": {"temperature": 0}, **kw}
    if not stream:
        return api.messages.create(**kw)
    with api.messages.stream(**kw) as events:
        deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
        final = events.get_final_message()
    if final.stop_reason == "tool_use":
        assert deltas[-1] == "input_json_delta"
    return final


def _prompt(served, message) -> str:
    return served.conv.engine.loaded.tokenizer.decode(message.token_ids)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_loop_gets_tool_use_blocks_and_pays_only_each_new_part(qwen3, served,
                                                                       monkeypatch, stream):
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    api = Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=60)
    messages: list = [{"role": "user", "content": "Weather in Paris?"}]
    scripted.reply(CALLING)
    called = _ask(api, messages, stream=stream)
    assert called.stop_reason == "tool_use"
    text, use = called.content
    assert text.type == "text" and text.text == "Let me check.\n"
    assert (use.type, use.name, use.input) == ("tool_use", "get_weather", {"city": "Paris"})
    stored = served.conv.messages[-1]
    assert stored.tool_calls[0].id == use.id
    messages += [called.to_param(), {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": use.id, "is_error": True,
         "content": [{"type": "text", "text": "no such city"}]},
        {"type": "text", "text": "Try again?", "cache_control": {"type": "ephemeral"}}]}]
    scripted.reply(CALLING)
    again = _ask(api, messages, stream=stream)
    stats = served.conv.turns.last_stats
    assert again.usage.cache_read_input_tokens == stats.reused_tokens == \
        called.usage.input_tokens + called.usage.cache_read_input_tokens \
        + called.usage.output_tokens
    result = served.conv.messages[-3]
    assert (result.role, result.tool_call_id, result.tool_name) \
        == ("tool", use.id, "get_weather")
    # The result and the text after it are what the turn prefilled, as the template writes them.
    added = _prompt(served, result)
    assert "<tool_response>\nError: no such city\n</tool_response>" in added
    assert "<|im_start|>user\nTry again?" in added.split("</tool_response>")[-1]
    assert stats.prefilled_tokens == len(result.token_ids)
    assert served.conv.messages[-2].content == "Try again?"
    messages += [again.to_param(), {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": again.content[1].id, "content": "sunny"}]}]
    scripted.reply("Sunny.")
    answered = _ask(api, messages, stream=stream)
    assert (answered.stop_reason, answered.content[0].text) == ("end_turn", "Sunny.")
    assert served.conv.turns.last_stats.prefilled_tokens == len(
        served.conv.messages[-2].token_ids)
    assert "<tool_response>\nsunny\n</tool_response>" in _prompt(served, served.conv.messages[-2])
    assert [m.role for m in served.conv.store.all_messages(served.conv.session.id)] \
        == ["user", "assistant", "tool", "user", "assistant", "tool", "assistant"]


def test_count_tokens_counts_the_tools_as_the_template_renders_them(served):
    api = Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    counted = api.messages.count_tokens(model="tiny", messages=messages, tools=[WEATHER])
    bare = api.messages.count_tokens(model="tiny", messages=messages)
    unused = api.messages.count_tokens(model="tiny", messages=messages, tools=[WEATHER],
                                       tool_choice={"type": "none"})
    assert counted.input_tokens > bare.input_tokens == unused.input_tokens
    asked = _ask(api, messages, max_tokens=2)
    assert counted.input_tokens == served.conv.turns.last_stats.prompt_tokens \
        == asked.usage.input_tokens
    assert '"name": "get_weather"' in _prompt(served, served.conv.messages[-2])
