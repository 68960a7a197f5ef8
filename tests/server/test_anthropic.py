"""Anthropic's Messages API through the official ``anthropic`` SDK against the
real server on the tiny model: replies equal the conversation's own, usage
is the ledger's (after a restart too), streams carry the real event
sequence, ``count_tokens`` is the prompt the engine renders, and every bad
request is a 400 in Anthropic's shape with nothing stored."""

from __future__ import annotations

import base64
import json
import socket

import anthropic
import pytest
from anthropic import Anthropic

from tests.server.conftest import request, serve
from tests.server.test_serve import _stored_reply, direct_reply

PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")).decode()
"""A 1x1 PNG: the tiny model sees no images."""

GREEDY = {"temperature": 0}
"""The SDK sends sampling numbers only in the body (``extra_body``)."""


def client(url: str, key: str = "unused") -> Anthropic:
    return Anthropic(base_url=url, api_key=key, max_retries=0, timeout=60)


def _ask(api: Anthropic, messages: list, max_tokens: int = 8, **kw):
    return api.messages.create(model="tiny", max_tokens=max_tokens, messages=messages,
                               extra_body=GREEDY, **kw)


def _check_usage(served, usage, previous=None) -> None:
    """The usage is the ledger's: what was computed, what the cache held."""
    stats = served.conv.turns.last_stats
    assert usage.cache_read_input_tokens == stats.reused_tokens
    assert usage.input_tokens == stats.prompt_tokens - stats.reused_tokens \
        == stats.prefilled_tokens
    assert usage.output_tokens == stats.generated_tokens
    assert usage.cache_creation_input_tokens == 0
    if previous is not None:  # the whole earlier exchange came from the cache
        assert stats.reused_tokens == previous.input_tokens \
            + previous.cache_read_input_tokens + previous.output_tokens


def test_a_message_equals_the_conversations_own_and_pays_only_new_tokens(tiny, tmp_path):
    expected = direct_reply(tiny, tmp_path, "What is MLX?", 12)
    db = tmp_path / "s.db"
    first = serve(tiny, db)
    try:
        api = client(first.url)
        messages: list = [{"role": "user", "content": "What is MLX?"}]
        reply = api.messages.create(model="tiny", max_tokens=12, messages=messages,
                                    system=[{"type": "text", "text": "Be brief.",
                                             "cache_control": {"type": "ephemeral"}}],
                                    metadata={"user_id": "someone"}, extra_body=GREEDY)
        assert reply.type == "message" and reply.role == "assistant" and reply.model == "tiny"
        assert reply.id.startswith("msg_") and reply.stop_reason == "max_tokens"
        assert reply.stop_sequence is None
        _check_usage(first, reply.usage)
        assert reply.usage.cache_read_input_tokens == 0 and reply.usage.output_tokens == 12
        assert first.conv.session.system_prompt == "Be brief."
        messages += [reply.to_param(), {"role": "user", "content": [
            {"type": "text", "text": "And then?"}]}]
        second = api.messages.create(model="tiny", max_tokens=12, messages=messages,
                                     system="Be brief.", extra_body=GREEDY)
        _check_usage(first, second.usage, reply.usage)
        # Without a system prompt the reply equals the conversation's own.
        plain = _ask(api, [{"role": "user", "content": "What is MLX?"}], 12)
        assert plain.content[0].text == expected
    finally:
        first.stop()
    again = serve(tiny, db)
    try:
        messages += [second.to_param(), {"role": "user", "content": "Go on."}]
        third = client(again.url).messages.create(model="tiny", max_tokens=12,
                                                  messages=messages, system="Be brief.",
                                                  extra_body=GREEDY)
        _check_usage(again, third.usage, second.usage)
        assert again.conv.turns.last_stats.cache_source == "snapshot"
        assert len(again.conv.store.list_sessions()) == 2  # the plain one beside
    finally:
        again.stop()


def test_a_stream_carries_the_real_event_sequence(served):
    api = client(served.url)
    messages = [{"role": "user", "content": "Say something."}]
    whole = _ask(api, messages, 10)
    with api.messages.stream(model="tiny", max_tokens=10, messages=messages,
                             extra_body=GREEDY) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == "max_tokens"
    _check_usage(served, final.usage)
    # The SDK's own events (ping is read and dropped by it; the raw stream has it).
    assert kinds[0] == "message_start" and kinds[1] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    raw = request(served.url, "POST", "/v1/messages", {
        "model": "tiny", "max_tokens": 4, "stream": True, "messages": messages})
    names = [line.split(": ", 1)[1] for line in raw.lines() if line.startswith("event: ")]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert set(names[3:-3]) == {"content_block_delta"}


def test_a_stop_sequence_ends_the_reply_and_is_named(served):
    api = client(served.url)
    ask = [{"role": "user", "content": "Say something."}]
    text = _ask(api, ask).content[0].text
    stop = text[3:5]
    cut = _ask(api, ask, stop_sequences=[stop, "never said"])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    said = cut.content[0].text if cut.content else ""
    assert said == text[:text.find(stop)] == served.conv.messages[-1].content
    with api.messages.stream(model="tiny", max_tokens=8, messages=ask, extra_body=GREEDY,
                             stop_sequences=[stop]) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)


def test_count_tokens_is_the_prompt_the_engine_renders(served):
    api = client(served.url)
    messages = [{"role": "user", "content": "Count me."},
                {"role": "assistant", "content": "Counted."},
                {"role": "user", "content": [{"type": "text", "text": "Again."}]}]
    counted = api.messages.count_tokens(model="tiny", messages=messages, system="Be brief.")
    asked = _ask(api, messages, system="Be brief.")
    assert counted.input_tokens == asked.usage.input_tokens \
        + asked.usage.cache_read_input_tokens == served.conv.turns.last_stats.prompt_tokens


def _error(served, body, path="/v1/messages", **kw):
    reply = request(served.url, "POST", path, body, **kw)
    data = reply.json()
    assert data["type"] == "error" and set(data["error"]) == {"type", "message"}
    return reply.status, data["error"]


def test_each_bad_request_is_refused_in_anthropics_shape_with_nothing_stored(served):
    hi = [{"role": "user", "content": "hi"}]
    status, err = _error(served, b"{not json")
    assert (status, err["type"]) == (400, "invalid_request_error")
    status, err = _error(served, {"model": "tiny", "messages": hi})
    assert status == 400 and "max_tokens" in err["message"]
    for bad in ({"messages": [{"role": "system", "content": "x"}]},
                {"messages": hi + [{"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}]},
                {"messages": hi, "container": "c1"},
                {"messages": [{"role": "user", "content": [{"type": "document"}]}]},
                {"messages": [{"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "nowhere", "content": "x"}]}]},
                {"messages": hi, "top_k": -1},
                {"messages": hi, "top_k": 2.5},
                {"messages": hi, "tool_choice": {"type": "any"}},
                {"messages": hi, "tool_choice": {"type": "tool"}},
                {"messages": hi, "tool_choice": {"type": "sometimes"}},
                {"messages": hi, "stop_sequences": "stop"},
                {"messages": hi, "thinking": {"type": "enabled"}}):
        status, err = _error(served, {"model": "tiny", "max_tokens": 4, **bad})
        assert (status, err["type"]) == (400, "invalid_request_error"), bad
    status, err = _error(served, {"model": "tiny", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": PNG}}]}]})
    assert status == 400 and "tiny sees no images" in err["message"]
    status, err = _error(served, {"model": "claude-x", "max_tokens": 4, "messages": hi})
    assert (status, err["type"]) == (404, "not_found_error")
    status, err = _error(served, {"model": "tiny", "messages": hi, "metadata": "me"},
                         path="/v1/messages/count_tokens")
    assert status == 400
    with pytest.raises(anthropic.BadRequestError) as caught:
        client(served.url).messages.create(model="tiny", max_tokens=4, messages=hi,
                                           tool_choice={"type": "any"})
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert all(s.message_count == 0 for s in served.conv.store.list_sessions())


def test_a_key_is_taken_as_x_api_key(tiny, tmp_path):
    keyed = serve(tiny, tmp_path / "s.db", api_key="s3cret")
    try:
        hi = [{"role": "user", "content": "hi"}]
        with pytest.raises(anthropic.AuthenticationError) as caught:
            client(keyed.url, "wrong").messages.create(model="tiny", max_tokens=2, messages=hi)
        assert caught.value.body["error"]["type"] == "authentication_error"
        assert client(keyed.url, "s3cret").messages.create(
            model="tiny", max_tokens=2, messages=hi).usage.output_tokens == 2
    finally:
        keyed.stop()


def test_a_client_that_leaves_a_stream_cancels_its_reply(served):
    body = json.dumps({"model": "tiny", "stream": True, "max_tokens": 1500,
                       "messages": [{"role": "user", "content": "Go on for a long time."}]})
    sock = socket.create_connection((served.server.host, served.server.port), timeout=30)
    sock.sendall((f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  f"\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    seen = b""
    while seen.count(b"event: content_block_delta") < 3:
        seen += sock.recv(4096)
    assert seen.startswith(b"HTTP/1.1 200")
    sock.close()
    reply = _stored_reply(served)
    assert reply.cancelled and 0 < reply.stats.generated_tokens < 1500


def test_a_reply_the_server_stops_mid_stream_ends_with_an_error_event(served):
    api = client(served.url)
    kinds = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        with api.messages.stream(model="tiny", max_tokens=1500, messages=[
                {"role": "user", "content": "Go on for a long time."}]) as stream:
            for e in stream:
                kinds.append(e.type)
                if kinds.count("content_block_delta") == 3:
                    served.conv.turns.cancel()  # what stopping the server does
    assert caught.value.body["error"]["type"] == "overloaded_error"
    assert "The server stopped before the reply was finished" in str(caught.value)
    assert "message_delta" not in kinds and "message_stop" not in kinds
