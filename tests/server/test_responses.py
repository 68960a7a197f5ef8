"""OpenAI's Responses API through the real server with the ``openai`` SDK, on
Qwen3's real template: a reply's reasoning, text and calls as output items
(streamed as the real event sequence, put together by the SDK's own
``responses.stream`` parser), ``store: true`` responses read, listed and
deleted, a ``previous_response_id`` follow-up that prefills only its new
input, ``store: false`` conversations found by the ledger (keyed by
``prompt_cache_key``), tools flattened or left out, and ``text.format``."""

from __future__ import annotations

import json

import openai
import pytest
from openai import OpenAI

from mlxchat.server.responses import tools

from tests.scripted import Scripted
from tests.server.conftest import real_qwen3, serve

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
"""The tool as the Responses API defines it (flat)."""
THINK_AND_CALL = ('<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n'
                  '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return real_qwen3(tmp_path_factory.mktemp("qwen3-responses"))


@pytest.fixture
def served(qwen3, tmp_path):
    running = serve(qwen3, tmp_path / "s.db", max_tokens=200)
    yield running
    running.stop()


def client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def _streamed(api: OpenAI, **kw):
    """The SDK's own parser over the stream: the event types and the response."""
    with api.responses.stream(model="tiny", **kw) as events:
        kinds = [e.type for e in events]
        final = events.get_final_response()
    return kinds, final


def _sent_back(output) -> list[dict]:
    """A response's output items as a stateless client sends them back."""
    return [item.model_dump(exclude_none=True) for item in output]


def test_a_streamed_reply_with_reasoning_text_and_a_call(qwen3, served, monkeypatch):
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    scripted.reply(THINK_AND_CALL)
    kinds, final = _streamed(client(served.url), input="Weather in Paris?",
                             tools=[WEATHER], reasoning={"summary": "auto"},
                             include=["reasoning.encrypted_content"], store=False)
    assert kinds[:3] == ["response.created", "response.in_progress",
                         "response.output_item.added"]
    assert kinds[-5:] == ["response.output_item.added",
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.done",
                          "response.output_item.done", "response.completed"]
    for kind in ("response.reasoning_summary_text.delta", "response.content_part.added",
                 "response.output_text.delta", "response.output_text.done",
                 "response.content_part.done"):
        assert kind in kinds
    thought, said, call = final.output
    assert thought.type == "reasoning" and thought.summary[0].text.strip() \
        == "The user wants weather."
    assert thought.encrypted_content.startswith("mlxchat-reasoning-1.")
    assert (said.type, said.content[0].text) == ("message", "Let me check.\n")
    assert (call.type, call.name, json.loads(call.arguments)) \
        == ("function_call", "get_weather", {"city": "Paris"})
    stored = served.conv.messages[-1]
    assert stored.tool_calls[0].id == call.call_id
    stats = served.conv.turns.last_stats
    assert (final.usage.input_tokens, final.usage.input_tokens_details.cached_tokens,
            final.usage.output_tokens) == (stats.prompt_tokens, stats.reused_tokens,
                                           stats.generated_tokens)


def test_store_false_is_found_by_the_ledger_and_pays_only_the_result(qwen3, served,
                                                                      monkeypatch):
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    api = client(served.url)
    scripted.reply(THINK_AND_CALL)
    first = [{"role": "developer", "content": "Be brief."},
             {"role": "user", "content": [{"type": "input_text", "text": "<env/>"}]},
             {"role": "user", "content": "Weather in Paris?"}]
    _, called = _streamed(api, input=first, tools=[WEATHER], store=False,
                          prompt_cache_key="abc", include=["reasoning.encrypted_content"])
    call = called.output[-1]
    scripted.reply("Sunny.")
    again = api.responses.create(model="tiny", tools=[WEATHER], store=False,
                                 prompt_cache_key="abc", input=first + _sent_back(
                                     called.output) + [{"type": "function_call_output",
                                                        "call_id": call.call_id,
                                                        "output": "sunny"}])
    stats = served.conv.turns.last_stats
    assert again.output_text == "Sunny."
    assert again.usage.input_tokens_details.cached_tokens == stats.reused_tokens \
        == called.usage.input_tokens + called.usage.output_tokens
    result = served.conv.messages[-2]
    assert stats.prefilled_tokens == len(result.token_ids)
    assert (result.role, result.tool_call_id, result.tool_name) \
        == ("tool", call.call_id, "get_weather")
    session = served.conv.session
    assert session.title == "prompt_cache_key abc" and session.system_prompt == "Be brief."
    # The two user items are one user turn; the reasoning sent back is the reply's.
    roles = [m.role for m in served.conv.store.get_session(session.id).messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert served.conv.messages[0].content == "<env/>\n\nWeather in Paris?"
    with pytest.raises(openai.NotFoundError):  # store: false keeps no response object
        api.responses.retrieve(again.id)


def test_a_stored_response_is_continued_read_listed_and_deleted(served):
    api = client(served.url)
    first = api.responses.create(model="tiny", instructions="Be brief.", input="Hello there",
                                 max_output_tokens=4, metadata={"k": "v"})
    assert (first.status, first.incomplete_details.reason) == ("incomplete",
                                                               "max_output_tokens")
    follow = api.responses.create(model="tiny", input="And again?", max_output_tokens=4,
                                  previous_response_id=first.id, instructions="Be brief.")
    stats = served.conv.turns.last_stats
    assert follow.usage.input_tokens_details.cached_tokens == stats.reused_tokens \
        == first.usage.input_tokens + first.usage.output_tokens
    assert stats.prefilled_tokens == len(served.conv.messages[-2].token_ids)
    assert follow.previous_response_id == first.id
    got = api.responses.retrieve(first.id)
    assert (got.id, got.output_text, got.metadata) == (first.id, first.output_text, {"k": "v"})
    listed = api.responses.input_items.list(follow.id, order="asc")
    assert [(i.type, i.role, i.content[0].text) for i in listed.data] \
        == [("message", "user", "And again?")]
    assert api.responses.delete(first.id) is None
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as refused:
        api.responses.create(model="tiny", input="More?", previous_response_id=first.id)
    assert refused.value.code == "previous_response_not_found"
    # The follow-up stands alone: it is still read and continued.
    assert api.responses.retrieve(follow.id).previous_response_id == first.id


def test_input_items_page_in_either_order(served):
    api = client(served.url)
    items = [{"role": "user", "content": f"part {i}", "id": f"msg_{i}"} for i in range(5)]
    made = api.responses.create(model="tiny", input=items, max_output_tokens=2)
    page = api.responses.input_items.list(made.id, limit=2)
    assert [i.id for i in page.data] == ["msg_4", "msg_3"] and page.has_more
    rest = api.responses.input_items.list(made.id, after="msg_3", order="desc")
    assert [i.id for i in rest.data] == ["msg_2", "msg_1", "msg_0"] and not rest.has_more
    forward = api.responses.input_items.list(made.id, order="asc", limit=100)
    assert [i.id for i in forward.data] == [f"msg_{i}" for i in range(5)]


def test_namespaces_flatten_and_built_in_tools_are_left_out(qwen3, served, monkeypatch,
                                                             caplog):
    monkeypatch.setattr(tools, "_said", set())  # what this process said so far
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    scripted.reply('<tool_call>\n{"name": "close_agent", "arguments": {"target": "a1"}}'
                   '\n</tool_call>')
    spaced = {"type": "namespace", "name": "agents", "description": "Sub-agents.",
              "tools": [{"type": "function", "name": "close_agent", "parameters": {
                  "type": "object", "properties": {"target": {"type": "string"}}}}]}
    api = client(served.url)
    with caplog.at_level("WARNING"):
        called = api.responses.create(model="tiny", input="Close a1.", store=False, tools=[
            WEATHER, spaced, {"type": "web_search", "external_web_access": False},
            {"type": "custom", "name": "apply_patch"}])
        prompt = served.conv.engine.loaded.tokenizer.decode(served.conv.messages[0].token_ids)
        again = api.responses.create(model="tiny", input="Again.", max_output_tokens=2,
                                     tools=[{"type": "web_search"}])
    assert again.status == "incomplete"
    call = called.output[-1]
    assert (call.name, call.namespace, json.loads(call.arguments)) \
        == ("close_agent", "agents", {"target": "a1"})
    said = [r.getMessage() for r in caplog.records if "not run by this server" in
            r.getMessage()]
    assert [s for s in said if "'web_search'" in s] == [said[0]]  # once per process
    assert any("'custom'" in s for s in said)
    assert '"name": "close_agent"' in prompt and '"name": "get_weather"' in prompt
    assert "web_search" not in prompt and "apply_patch" not in prompt


def test_parallel_tool_calls_false_keeps_the_first_call(qwen3, served, monkeypatch):
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    one = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>'
    scripted.reply(one % "Oslo" + "\n" + one % "Rome")
    both = client(served.url).responses.create(model="tiny", input="Two cities?",
                                               tools=[WEATHER])
    assert [json.loads(c.arguments)["city"] for c in both.output
            if c.type == "function_call"] == ["Oslo", "Rome"]
    scripted.reply(one % "Oslo" + "\n" + one % "Rome")
    first = client(served.url).responses.create(model="tiny", input="Two cities?",
                                                tools=[WEATHER], parallel_tool_calls=False)
    assert [json.loads(c.arguments)["city"] for c in first.output
            if c.type == "function_call"] == ["Oslo"]
    assert len(served.conv.messages[-1].tool_calls) == 1  # stored as the client saw it


def test_text_format_holds_the_reply_to_its_schema(served):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    reply = client(served.url).responses.create(
        model="tiny", input="A number, as JSON.", max_output_tokens=30, temperature=0,
        text={"format": {"type": "json_schema", "name": "n", "schema": schema,
                         "strict": True}})
    if reply.status == "completed":
        assert set(json.loads(reply.output_text)) == {"n"}
    else:
        assert reply.output_text.startswith('{')
