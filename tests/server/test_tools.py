"""Tools through the API: the definitions reach the chat template (and the
ledger key), a reply's tool-call markup comes back in OpenAI's shape, whole
and streamed, and what the client sends back finds the stored branch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI

from mlxchat.models import load_folder
from mlxchat.models.tools import ToolCall, call_markup
from mlxchat.server.core.requests import tool_signature
from mlxchat.server.core.service import Finished, Piece
from mlxchat.server.core.tool_calls import (
    CallCut,
    calls_signature,
    openai_calls,
    reply_parts,
    with_ids,
)
from mlxchat.server.openai.chat import _ChatShape, _events
from mlxchat.turn_stats import TurnStats

from tests.families.builders import with_template, write_family_model
from tests.server.conftest import WEATHER, real_qwen3, request, serve

REAL = Path(__file__).parents[1] / "families" / "real_templates"
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
REPLY = 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n' \
        '</tool_call>'


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return real_qwen3(tmp_path_factory.mktemp("qwen3-tools"))


@pytest.fixture
def served(qwen3, tmp_path):
    running = serve(qwen3, tmp_path / "s.db")
    yield running
    running.stop()


def _ask(api: OpenAI, messages: list[dict], tools: list[dict] | None):
    extra = {"tools": tools} if tools else {}
    return api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                       max_tokens=4, **extra)


def test_tools_reach_the_template_and_the_ledger_key(served):
    api = OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60)
    tok = served.conv.engine.loaded.tokenizer
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    plain = _ask(api, messages, None)
    with_tools = _ask(api, messages, [WEATHER])
    assert with_tools.usage.prompt_tokens > plain.usage.prompt_tokens
    user = served.conv.messages[-2]
    assert user.role == "user" and user.ledger_start
    rendered = tok.decode(user.token_ids)
    assert "<tools>" in rendered and '"get_weather"' in rendered
    # The next turn with the same tools extends the ledger: only the new message is prefilled.
    messages += [{"role": "assistant", "content": with_tools.choices[0].message.content},
                 {"role": "user", "content": "And tomorrow?"}]
    second = _ask(api, messages, [WEATHER])
    assert second.usage.prompt_tokens_details.cached_tokens \
        == with_tools.usage.prompt_tokens + with_tools.usage.completion_tokens
    assert not served.conv.messages[-2].ledger_start
    # Other tools: the template renders every message differently, a new ledger starts.
    other = _ask(api, messages, [TIME])
    user = served.conv.messages[-2]
    assert user.ledger_start and '"get_time"' in tok.decode(user.token_ids)
    assert other.usage.prompt_tokens_details.cached_tokens < other.usage.prompt_tokens


def test_bad_tools_and_misplaced_tool_results_are_refused_with_the_field(served):
    base = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    bad = request(served.url, "POST", "/v1/chat/completions", {**base, "tools": [{"x": 1}]})
    assert bad.status == 400 and bad.json()["error"]["param"] == "tools[0]"
    choice = request(served.url, "POST", "/v1/chat/completions",
                     {**base, "tools": [WEATHER], "tool_choice": "always"})
    assert choice.status == 400 and choice.json()["error"]["param"] == "tool_choice"
    result = request(served.url, "POST", "/v1/chat/completions", {**base, "messages": [
        {"role": "user", "content": "hi"}, {"role": "tool", "content": "{}",
                                            "tool_call_id": "call_1"}]})
    assert result.status == 400 and "follow the reply" in result.json()["error"]["message"]
    assert not served.conv.messages  # nothing stored


def test_a_replys_call_markup_becomes_openai_tool_calls(qwen3):
    tok = qwen3.tokenizer
    parts = reply_parts(tok, REPLY, tools=True)
    assert parts.content == "Let me check."
    assert parts.calls == [ToolCall("get_weather", {"city": "Paris"})]
    assert reply_parts(tok, REPLY, tools=False).content == REPLY
    shaped = openai_calls(with_ids(parts.calls))
    assert shaped[0]["type"] == "function" and shaped[0]["id"].startswith("call_")
    assert json.loads(shaped[0]["function"]["arguments"]) == {"city": "Paris"}
    # What the client sends back hashes like the reply we indexed.
    assert tool_signature(shaped, "m") == calls_signature(parts.calls)
    # Streamed: the text before the markup goes out, the markup is held back.
    cut = CallCut(call_markup(tok))
    sent = "".join(cut.feed(REPLY[i:i + 3]) for i in range(0, len(REPLY), 3))
    assert sent == "Let me check."


async def test_streamed_calls_arrive_as_delta_tool_calls(qwen3):
    parts = reply_parts(qwen3.tokenizer, REPLY, tools=True)
    end = Finished(parts.content, "", TurnStats(), "tool_calls", 1, with_ids(parts.calls))

    async def rest():
        yield end

    class _Chat:
        include_usage = False

    chunks = [json.loads(line[6:]) async for line in _events(
        _ChatShape("tiny"), _Chat(), Piece("Let me"), rest()) if line != "data: [DONE]\n\n"]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content") or "" for d in deltas) == "Let me check."
    calls = next(d["tool_calls"] for d in deltas if "tool_calls" in d)
    assert calls[0]["index"] == 0 and calls[0]["function"]["name"] == "get_weather"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # A call cut short stays text: streamed whole, though its markup was held back.
    cut_short = REPLY[:-len("</tool_call>")]
    parts = reply_parts(qwen3.tokenizer, cut_short, tools=True)
    assert parts.calls == [] and parts.content == cut_short

    async def cut_end():
        yield Finished(parts.content, "", TurnStats(), "length", 1, ())

    texts = [json.loads(line[6:])["choices"][0]["delta"].get("content") or "" async for line
             in _events(_ChatShape("tiny"), _Chat(), Piece("Let me check."), cut_end())
             if line != "data: [DONE]\n\n"]
    assert "".join(texts) == cut_short
    whole = _ChatShape("tiny").completion(end)["choices"][0]
    assert whole["finish_reason"] == "tool_calls"
    assert whole["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_ollama_gets_calls_in_its_own_shape(qwen3):
    from mlxchat.server.ollama.replies import ChatShape, lines as stream, whole as whole_body

    parts = reply_parts(qwen3.tokenizer, REPLY, tools=True)
    end = Finished(parts.content, "", TurnStats(), "tool_calls", 1, with_ids(parts.calls))
    whole = whole_body(ChatShape("tiny"), end, None)
    call = whole["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert call["function"]["arguments"] == {"city": "Paris"}  # an object, not a string
    assert whole["done_reason"] == "stop" and whole["message"]["content"] == "Let me check."

    async def rest():
        yield end

    lines = [json.loads(line) async for line in stream(ChatShape("tiny"), Piece("Let me check."),
                                                         rest())]
    assert [line["done"] for line in lines] == [False, False, True]
    assert lines[1]["message"]["tool_calls"] == whole["message"]["tool_calls"]
    # What a client sends back (arguments as an object) hashes like the reply we indexed.
    assert tool_signature(whole["message"]["tool_calls"], "m") == calls_signature(parts.calls)


async def test_ollama_streams_the_text_held_back_at_a_calls_markup(qwen3):
    """What the stream held back (a possible marker's start, a call cut short,
    text after the calls) goes out before the end: the client's copy is the
    stored one."""
    from mlxchat.server.ollama.replies import ChatShape, lines as stream

    for text in (REPLY + "\nDone.", REPLY[:-len("</tool_call>")]):
        parts = reply_parts(qwen3.tokenizer, text, tools=True)
        end = Finished(parts.content, "", TurnStats(), "stop", 1, with_ids(parts.calls))

        async def rest():
            yield end

        lines = [json.loads(line)
                 async for line in stream(ChatShape("tiny"), Piece("Let me"), rest())]
        assert "".join(line["message"]["content"] for line in lines) == parts.content
        assert lines[-1]["done"]


def test_a_call_id_the_model_wrote_is_the_one_the_client_gets(tmp_path_factory):
    """Mistral writes its calls' ids (9 characters, as its template renders
    them): kept, the results the client sends back render as the model wrote."""
    family = with_template("mistral", (REAL / "mistral-nemo.jinja").read_text())
    tok = load_folder(write_family_model(family, tmp_path_factory.mktemp("nemo"))).tokenizer
    written = 'Sure.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, ' \
              '"id": "abc123def"}]'
    parts = reply_parts(tok, written, tools=True)
    assert [(c.name, c.id) for c in parts.calls] == [("get_weather", "abc123def")]
    assert [c.id for c in with_ids(parts.calls)] == ["abc123def"]
    unnamed = reply_parts(tok, 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', tools=True)
    assert with_ids(unnamed.calls)[0].id.startswith("call_")
