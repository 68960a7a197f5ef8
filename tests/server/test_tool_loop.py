"""A client's tool loop through the API on Qwen3's real template: tool
results (role 'tool') render as the template writes them and prefill only
themselves, a reply's calls are stored so the request that sends them back
finds its branch, and all of it survives a restart."""

from __future__ import annotations

import json

import pytest
from openai import OpenAI

from mlxchat.chat import CalledTool
from mlxchat.engine.events import TurnDone
from mlxchat.server.core.api_turns import ApiRequest, ApiTurns, IncomingMessage
from mlxchat.server.core.tool_calls import calls_signature

from tests.scripted import Scripted
from tests.server.conftest import WEATHER, open_tiny, real_qwen3, request, serve

CALL = {"id": "call_abc", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
# A reply as Qwen3 writes a call: a line of text, then the call's markup.
CALLING = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' \
          '\n</tool_call>'


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return real_qwen3(tmp_path_factory.mktemp("qwen3-loop"))


def _client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def _ask(api: OpenAI, messages: list[dict]):
    return api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                       max_tokens=4, tools=[WEATHER])


def _as_sent(reply) -> dict:
    """The reply as a client sends it back."""
    message = reply.choices[0].message
    out: dict = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [c.model_dump() for c in message.tool_calls]
    return out


def _extends(served, usage, previous) -> None:
    """Only the new part was prefilled: the cache held the whole earlier exchange."""
    stats = served.conv.turns.last_stats
    assert usage.prompt_tokens_details.cached_tokens == stats.reused_tokens \
        == previous.prompt_tokens + previous.completion_tokens
    assert usage.prompt_tokens == stats.prompt_tokens


def test_a_tool_loop_prefills_only_each_new_part_and_survives_a_restart(qwen3, tmp_path):
    db = tmp_path / "s.db"
    messages: list[dict] = [{"role": "user", "content": "Weather in Paris?"}]
    first = serve(qwen3, db, max_tokens=4)
    try:
        api = _client(first.url)
        asked = _ask(api, messages)
        messages += [_as_sent(asked), {"role": "tool", "tool_call_id": "call_abc",
                                       "content": '{"sky": "clear"}'}]
        answered = _ask(api, messages)
        _extends(first, answered.usage, asked.usage)
        result = first.conv.messages[-2]
        assert result.role == "tool" and not result.ledger_start
        text = qwen3.tokenizer.decode(result.token_ids)
        assert "<tool_response>" in text and '"sky": "clear"' in text
        assert first.conv.turns.last_stats.prefilled_tokens == len(result.token_ids)
    finally:
        first.stop()
    again = serve(qwen3, db, max_tokens=4)
    try:
        messages += [_as_sent(answered), {"role": "user", "content": "Thanks!"}]
        thanked = _ask(_client(again.url), messages)
        _extends(again, thanked.usage, answered.usage)
        assert again.conv.turns.last_stats.cache_source == "snapshot"
        roles = [m.role for m in again.conv.messages]
        assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
        assert len(again.conv.store.list_sessions()) == 1
    finally:
        again.stop()


def test_a_history_with_calls_is_stored_and_rendered_as_the_template_writes_it(qwen3,
                                                                              tmp_path):
    served = serve(qwen3, tmp_path / "s.db", max_tokens=4)
    try:
        api = _client(served.url)
        messages = [{"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "call_abc", "content": "18 C, clear"}]
        answered = _ask(api, messages)
        stored = served.conv.messages
        assert stored[1].tool_calls == (CalledTool("get_weather", {"city": "Paris"},
                                                   "call_abc"),)
        assert (stored[2].tool_call_id, stored[2].tool_name) == ("call_abc", "get_weather")
        prompt = qwen3.tokenizer.decode(stored[2].token_ids)
        assert stored[2].ledger_start
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
        assert "<tool_response>\n18 C, clear\n</tool_response>" in prompt
        messages += [_as_sent(answered), {"role": "user", "content": "And Oslo?"}]
        _extends(served, _ask(api, messages).usage, answered.usage)
        # Ollama's shape: a result names its tool, calls carry arguments as objects.
        ollama = request(served.url, "POST", "/api/chat", {
            "model": "tiny", "stream": False, "tools": [WEATHER], "options": {"num_predict": 4},
            "messages": [{"role": "user", "content": "Weather in Rome?"},
                         {"role": "assistant", "content": "", "tool_calls": [
                             {"function": {"name": "get_weather",
                                           "arguments": {"city": "Rome"}}}]},
                         {"role": "tool", "tool_name": "get_weather", "content": "warm"}]})
        assert ollama.status == 200 and ollama.json()["done"]
        assert served.conv.messages[-2].tool_name == "get_weather"
        assert served.conv.messages[-3].tool_calls[0].arguments == {"city": "Rome"}
    finally:
        served.stop()


def test_a_reply_that_calls_tools_is_stored_with_its_calls_and_found_again(qwen3, tmp_path):
    """The tiny model writes no call of its own: its reply is read as one (as
    the server reads a call's markup), and everything after is real."""
    conv = open_tiny(qwen3, tmp_path / "s.db", max_tokens=4)
    try:
        turns = ApiTurns(conv, conv.store)
        tools = json.dumps([WEATHER], sort_keys=True)
        call = CalledTool("get_weather", {"city": "Paris"}, "call_1")
        user = IncomingMessage("user", "Weather in Paris?")

        def as_call(done: TurnDone) -> IncomingMessage:
            return IncomingMessage("assistant", "", calls_signature([call]), (call,))

        first = turns.begin(ApiRequest(None, [user], tools=tools), as_call)
        asked = next(e for e in first.events if isinstance(e, TurnDone)).stats
        for _ in first.events:
            pass
        reply = conv.messages[-1]
        assert reply.tool_calls == (call,) and reply.content == ""
        sent_back = IncomingMessage("assistant", "", calls_signature([call]), (call,))
        result = IncomingMessage("tool", "sunny", json.dumps(["call_1", "get_weather"]),
                                 call_id="call_1", tool_name="get_weather")
        second = turns.begin(ApiRequest(None, [user, sent_back, result], tools=tools),
                             lambda done: IncomingMessage("assistant", done.reply))
        stats = next(e for e in second.events if isinstance(e, TurnDone)).stats
        for _ in second.events:
            pass
        assert second.extended == 2 and conv.messages[-2].role == "tool"
        assert stats.reused_tokens == asked.prompt_tokens + asked.generated_tokens
        assert stats.prefilled_tokens == len(conv.messages[-2].token_ids)
    finally:
        conv.shutdown()


def _streamed(api: OpenAI, messages: list[dict]):
    """A streamed reply as a client puts it together: the message it sends
    back, and the usage."""
    content, calls, usage = "", [], None
    for chunk in api.chat.completions.create(
            model="tiny", messages=messages, temperature=0, max_tokens=200, tools=[WEATHER],
            stream=True, stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            calls += [c.model_dump() for c in choice.delta.tool_calls or ()]
    sent = {"role": "assistant", "content": content}
    if calls:
        sent["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    return sent, usage


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_servers_own_call_sent_back_finds_its_branch(qwen3, tmp_path, monkeypatch, stream):
    """A reply the model wrote as a call, sent back with its result as the client
    got it (streamed or whole), extends the stored branch with the call's id."""
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    served = serve(qwen3, tmp_path / "s.db", max_tokens=200)
    try:
        api = _client(served.url)
        messages: list[dict] = [{"role": "user", "content": "Weather in Paris?"}]
        scripted.reply(CALLING)
        if stream:
            sent, asked = _streamed(api, messages)
        else:
            reply = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                                max_tokens=200, tools=[WEATHER])
            sent, asked = _as_sent(reply), reply.usage
        stored = served.conv.messages[-1]
        assert [c["id"] for c in sent["tool_calls"]] == [c.id for c in stored.tool_calls]
        assert stored.tool_calls[0].arguments == {"city": "Paris"}
        call_id = sent["tool_calls"][0]["id"]
        messages += [sent, {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]
        scripted.reply("Sunny.")
        answered = _ask(api, messages)
        _extends(served, answered.usage, asked)
        store = served.conv.store
        assert [m.role for m in store.all_messages(served.conv.session.id)] \
            == ["user", "assistant", "tool", "assistant"]  # no branch beside the reply
        assert served.conv.messages[2].tool_call_id == call_id
    finally:
        served.stop()


def test_several_results_are_stored_after_their_reply_and_extend_the_ledger(qwen3, tmp_path):
    conv = open_tiny(qwen3, tmp_path / "s.db", max_tokens=4)
    try:
        turns = ApiTurns(conv, conv.store)
        tools = json.dumps([WEATHER], sort_keys=True)
        calls = (CalledTool("get_weather", {"city": "Paris"}, "c1"),
                 CalledTool("get_weather", {"city": "Oslo"}, "c2"))
        reply = IncomingMessage("assistant", "", calls_signature(calls), calls)
        user = IncomingMessage("user", "Weather in Paris and Oslo?")
        first = turns.begin(ApiRequest(None, [user], tools=tools), lambda done: reply)
        for _ in first.events:
            pass
        results = [IncomingMessage("tool", text, json.dumps([c.id, c.name]), call_id=c.id,
                                   tool_name=c.name) for c, text in zip(calls, ("sun", "snow"))]
        second = turns.begin(ApiRequest(None, [user, reply, *results], tools=tools),
                             lambda done: IncomingMessage("assistant", done.reply))
        stats = next(e for e in second.events if isinstance(e, TurnDone)).stats
        for _ in second.events:
            pass
        stored = conv.messages[2:4]
        assert [(m.content, m.tool_call_id) for m in stored] == [("sun", "c1"), ("snow", "c2")]
        assert stored[1].parent_id == stored[0].id and stored[1].token_ids == []
        text = qwen3.tokenizer.decode(stored[0].token_ids)
        assert "sun" in text and "snow" in text  # the first holds what both add
        assert stats.prefilled_tokens == len(stored[0].token_ids)
    finally:
        conv.shutdown()


def test_results_followed_by_a_user_message_extend_the_ledger(qwen3, tmp_path, monkeypatch):
    """Tool results and a user message after them in one request are the new
    part together: only they are prefilled, the reply that called stays cached."""
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    served = serve(qwen3, tmp_path / "s.db", max_tokens=200)
    try:
        api = _client(served.url)
        messages: list[dict] = [{"role": "user", "content": "Weather in Paris?"}]
        scripted.reply(CALLING)
        asked = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                            max_tokens=200, tools=[WEATHER])
        call_id = asked.choices[0].message.tool_calls[0].id
        messages += [_as_sent(asked), {"role": "tool", "tool_call_id": call_id,
                                       "content": "sunny"},
                     {"role": "user", "content": "Thanks, and tomorrow?"}]
        scripted.reply("Sunny too.")
        _extends(served, _ask(api, messages).usage, asked.usage)
        tool, user = served.conv.messages[2:4]
        assert (tool.role, user.role, user.content) == ("tool", "user", "Thanks, and tomorrow?")
        assert served.conv.turns.last_stats.prefilled_tokens == len(tool.token_ids)
        assert "Thanks, and tomorrow?" in qwen3.tokenizer.decode(tool.token_ids)
    finally:
        served.stop()
