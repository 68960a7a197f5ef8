"""A conversation that ends with the assistant's message (assistant prefill),
on ``/v1/chat/completions`` and Anthropic's ``/v1/messages``: the reply
continues the given text (only the continuation is sent), the stored reply
is the whole message, and the next turn, sending it back whole, reuses
every token of it."""

from __future__ import annotations

from anthropic import Anthropic
from openai import OpenAI

from tests.server.conftest import request

ASK = {"role": "user", "content": "What is the best book? Answer in JSON."}
BEGUN = '{"title": "'


def test_chat_continues_the_given_reply(served):
    api = OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0, timeout=60)
    reply = api.chat.completions.create(model="tiny", temperature=0, max_tokens=6, messages=[
        ASK, {"role": "assistant", "content": BEGUN}])
    rest = reply.choices[0].message.content
    assert rest and not rest.startswith(BEGUN)
    stored = served.conv.messages[-1]
    assert stored.role == "assistant" and stored.content == BEGUN + rest
    # The prompt ended with the open reply: more prompt than the question alone.
    plain = api.chat.completions.create(model="tiny", temperature=0, max_tokens=6,
                                        messages=[ASK])
    assert reply.usage.prompt_tokens > plain.usage.prompt_tokens
    assert plain.choices[0].message.content != rest
    # Sent back whole, with a question after it: everything before is reused.
    follow = api.chat.completions.create(model="tiny", temperature=0, max_tokens=4, messages=[
        ASK, {"role": "assistant", "content": BEGUN + rest},
        {"role": "user", "content": "Why?"}])
    assert follow.usage.prompt_tokens_details.cached_tokens \
        == reply.usage.prompt_tokens + reply.usage.completion_tokens
    streamed = list(api.chat.completions.create(
        model="tiny", temperature=0, max_tokens=6, stream=True,
        messages=[ASK, {"role": "assistant", "content": BEGUN}]))
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == rest


def test_a_begun_reply_with_tool_calls_is_refused(served):
    reply = request(served.url, "POST", "/v1/chat/completions", {
        "model": "tiny", "messages": [ASK, {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "f", "arguments": "{}"}}]}]})
    assert reply.status == 400 and reply.json()["error"]["param"] == "messages"


def test_anthropic_continues_the_given_reply(served):
    api = Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=60)
    messages = [ASK, {"role": "assistant", "content": BEGUN}]
    reply = api.messages.create(model="tiny", max_tokens=6, messages=messages,
                                extra_body={"temperature": 0})
    rest = reply.content[0].text
    assert served.conv.messages[-1].content == BEGUN + rest
    counted = api.messages.count_tokens(model="tiny", messages=messages)
    assert counted.input_tokens == reply.usage.input_tokens \
        + reply.usage.cache_read_input_tokens
    follow = api.messages.create(model="tiny", max_tokens=4, extra_body={"temperature": 0},
                                 messages=[ASK, {"role": "assistant", "content": BEGUN + rest},
                                           {"role": "user", "content": "Why?"}])
    assert follow.usage.cache_read_input_tokens == reply.usage.input_tokens \
        + reply.usage.cache_read_input_tokens + reply.usage.output_tokens
    with api.messages.stream(model="tiny", max_tokens=6, messages=messages,
                             extra_body={"temperature": 0}) as events:
        assert events.get_final_message().content[0].text == rest
