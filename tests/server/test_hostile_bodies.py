"""Bodies a hostile client sends, against the real server on 127.0.0.1: each
is refused with its own status and error, nothing is stored, no traceback
is logged, and the server goes on answering."""

from __future__ import annotations

import json
import logging

import pytest

from tests.server.conftest import request, serve

CHAT, OLLAMA, COMPLETIONS = "/v1/chat/completions", "/api/chat", "/v1/completions"


@pytest.fixture
def roomy(tiny, tmp_path):
    """The server with the real 16 MB body limit."""
    running = serve(tiny, tmp_path / "s.db", max_body_bytes=16 << 20)
    yield running
    running.stop()


def _nested_lists(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _nested_objects(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def _no_tracebacks(caplog) -> None:
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not failures, failures[0].getMessage()


def test_deeply_nested_json_is_a_400_not_a_traceback(roomy, caplog):
    caplog.set_level(logging.INFO)
    user = b'{"role": "user", "content": "hi"}'
    bodies = [
        (CHAT, b'{"model": "tiny", "messages": ' + _nested_lists(100_000) + b"}"),
        (CHAT, b'{"model": "tiny", "messages": [' + user + b'], "extra": '
         + _nested_objects(50_000) + b"}"),
        (OLLAMA, b'{"model": "tiny", "messages": ' + _nested_lists(100_000) + b"}"),
        (COMPLETIONS, b'{"model": "tiny", "prompt": "hi", "extra": '
         + _nested_objects(50_000) + b"}"),
        # Under Python's recursion limit, yet deeper than any request needs.
        (CHAT, b'{"model": "tiny", "messages": [' + user + b'], "tools": '
         + _nested_lists(900) + b"}"),
    ]
    for path, body in bodies:
        reply = request(roomy.url, "POST", path, body)
        assert reply.status == 400, (path, reply.body[:200])
        error = reply.json()["error"]
        if path == OLLAMA:
            assert "nested" in error
        else:
            assert error["code"] == "invalid_json" and "nested" in error["message"]
    _no_tracebacks(caplog)
    assert all(s.message_count == 0 for s in roomy.conv.store.list_sessions())
    ok = request(roomy.url, "POST", CHAT, {"model": "tiny", "max_tokens": 2,
                                           "messages": [{"role": "user", "content": "hi"}]})
    assert ok.status == 200


def test_deeply_nested_tool_call_arguments_stay_text(roomy, caplog):
    """Arguments are a JSON string the server parses itself: one nested past the
    limit is kept as the string it was, as any other unparsable arguments are."""
    caplog.set_level(logging.INFO)
    deep = "[" * 50_000 + "]" * 50_000
    messages = [{"role": "user", "content": "call it"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"id": "c1", "type": "function",
                                 "function": {"name": "f", "arguments": deep}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "done"}]
    reply = request(roomy.url, "POST", CHAT, {"model": "tiny", "max_tokens": 2,
                                              "messages": messages})
    assert reply.status in (200, 400), reply.body[:300]
    if reply.status == 400:
        assert reply.json()["error"]["code"] != "internal_error"
    _no_tracebacks(caplog)


def test_a_max_tokens_past_the_window_is_refused_as_openai_does(tiny, tmp_path, caplog):
    """10**12 (or the window + 1) is a 400 naming the field, in each API's own
    shape, before anything runs or is stored; the window itself is taken."""
    caplog.set_level(logging.INFO)
    narrow = serve(tiny, tmp_path / "n.db", context_window=256)
    hello = [{"role": "user", "content": "hi"}]
    try:
        for too_many in (10**12, 257):
            for name in ("max_tokens", "max_completion_tokens"):
                reply = request(narrow.url, "POST", CHAT, {"model": "tiny", "messages": hello,
                                                           name: too_many})
                assert reply.status == 400, reply.body[:200]
                error = reply.json()["error"]
                assert error == {"message": f"{name} is too large: {too_many}. This model's "
                                 "context window holds 256 tokens, the prompt's and the "
                                 f"completion's together, whereas you provided {too_many}.",
                                 "type": "invalid_request_error", "param": name,
                                 "code": "invalid_value"}
            ollama = request(narrow.url, "POST", OLLAMA, {
                "model": "tiny", "messages": hello, "options": {"num_predict": too_many}})
            assert ollama.status == 400
            assert ollama.json() == {"error": f"num_predict is too large: {too_many}. This "
                                     "model's context window holds 256 tokens, the prompt's "
                                     "and the completion's together, whereas you "
                                     f"provided {too_many}."}
            raw = request(narrow.url, "POST", COMPLETIONS, {"model": "tiny", "prompt": "Once",
                                                            "max_tokens": too_many})
            assert raw.status == 400 and raw.json()["error"]["param"] == "max_tokens"
        assert all(s.message_count == 0 for s in narrow.conv.store.list_sessions())
        assert narrow.service.answered == 0
        _no_tracebacks(caplog)
        _say_capped(narrow)
        _ollama_unbounded(narrow)
    finally:
        narrow.stop()


def _ollama_unbounded(narrow) -> None:
    """Ollama's num_predict -1 (no limit) and -2 (fill the context) run until the
    model stops or the window is full: the reply a num_predict of all the room
    left gives, with no num_predict_capped_to."""
    hello = [{"role": "user", "content": "hi"}]

    def reply(num_predict: int) -> dict:
        answer = request(narrow.url, "POST", OLLAMA, {
            "model": "tiny", "messages": hello, "stream": False,
            "options": {"temperature": 0, "num_predict": num_predict}})
        assert answer.status == 200, answer.body[:200]
        return answer.json()

    whole = reply(-1)
    assert "num_predict_capped_to" not in whole
    prompt = request(narrow.url, "POST", CHAT, {"model": "tiny", "messages": hello,
                                                "max_tokens": 1}).json()["usage"]
    room = 256 - prompt["prompt_tokens"]
    assert 0 < whole["eval_count"] <= room
    explicit = reply(room)
    assert explicit["message"] == whole["message"] and explicit["eval_count"] == whole[
        "eval_count"]
    assert reply(-2)["message"] == whole["message"]


def test_a_max_tokens_that_is_no_whole_number_from_1_is_refused(served):
    for value in (2.5, 4.0, "4", -1, 0, True, False, [4], {"n": 4}):
        _refused_everywhere(served, value)
    assert served.service.answered == 0


def _refused_everywhere(served, value) -> None:
    hello = [{"role": "user", "content": "hi"}]
    for path, body, name in (
            (CHAT, {"model": "tiny", "messages": hello, "max_tokens": value}, "max_tokens"),
            (CHAT, {"model": "tiny", "messages": hello, "max_completion_tokens": value},
             "max_completion_tokens"),
            (COMPLETIONS, {"model": "tiny", "prompt": "Once", "max_tokens": value},
             "max_tokens"),
            (OLLAMA, {"model": "tiny", "messages": hello, "options": {"num_predict": value}},
             "num_predict")):
        if path == OLLAMA and value == -1:
            continue  # Ollama's "no limit"
        reply = request(served.url, "POST", path, body)
        assert reply.status == 400, (path, value, reply.body[:200])
        error = reply.json()["error"]
        if path == OLLAMA:
            assert error == f"'{name}' must be a whole number >= 1, or -1 or -2."
        else:
            assert error["param"] == name and error["code"] == "invalid_value"


def _say_capped(roomy) -> None:
    """A max_tokens the window holds but the prompt leaves no room for is
    taken; the reply runs to the window and the response says where."""
    hello = [{"role": "user", "content": "hi"}]
    whole = request(roomy.url, "POST", CHAT, {"model": "tiny", "messages": hello,
                                              "max_tokens": 256, "temperature": 0})
    assert whole.status == 200
    usage = whole.json()["usage"]
    room = 256 - usage["prompt_tokens"] + 1
    assert usage["max_tokens_capped_to"] == room >= usage["completion_tokens"]
    assert whole.headers["x-max-tokens-capped"] == str(room)
    streamed = request(roomy.url, "POST", CHAT, {
        "model": "tiny", "messages": hello, "max_tokens": 256, "stream": True,
        "stream_options": {"include_usage": True}, "temperature": 0})
    last = [line for line in streamed.lines() if line.startswith("data: {")][-1]
    assert json.loads(last[6:])["usage"]["max_tokens_capped_to"] == room
    ollama = request(roomy.url, "POST", OLLAMA, {"model": "tiny", "messages": hello,
                                                 "stream": False,
                                                 "options": {"num_predict": 256}})
    assert ollama.json()["num_predict_capped_to"] == room
    raw = request(roomy.url, "POST", COMPLETIONS, {"model": "tiny", "prompt": "Once",
                                                   "max_tokens": 256})
    assert raw.json()["usage"]["max_tokens_capped_to"] > 0
    # A max_tokens the window holds says nothing.
    small = request(roomy.url, "POST", CHAT, {"model": "tiny", "messages": hello,
                                              "max_tokens": 4})
    assert "max_tokens_capped_to" not in small.json()["usage"]
    assert "x-max-tokens-capped" not in small.headers


def test_a_15_mb_message_is_refused_from_its_floor_without_tokenizing(roomy):
    """A message under the body limit but far past the window is refused
    before it queues, from a floor no tokenizing is needed for (a 15 MB
    message took 41-56 s to refuse, tokenized on the lane)."""
    huge = "All work and no play makes a dull model.\n" * (15_000_000 // 41)
    body = {"model": "tiny", "messages": [{"role": "user", "content": huge}]}
    for path in (CHAT, OLLAMA):
        reply = request(roomy.url, "POST", path, body, timeout_s=20)
        assert reply.status == 400
        error = reply.json()["error"]
        text = error if path == OLLAMA else error["message"]
        if path == CHAT:
            assert error["code"] == "context_length_exceeded"
        assert "This message is at least" in text and "2,048 tokens" in text
    raw = request(roomy.url, "POST", COMPLETIONS, {"model": "tiny", "prompt": huge},
                  timeout_s=20)
    assert raw.status == 400 and raw.json()["error"]["code"] == "context_length_exceeded"
    assert all(s.message_count == 0 for s in roomy.conv.store.list_sessions())


def test_a_large_message_past_the_window_is_counted_off_the_lane(bundled_model, tmp_path):
    """One that passes the floor (under 8,192 x 81 bytes for the bundled model)
    but not the window is counted on a thread of its own, up to the window."""
    served = serve(bundled_model, tmp_path / "s.db", max_body_bytes=16 << 20)
    try:
        large = "The river runs past the mill and turns the wheel.\n" * 8000  # 400 KB
        reply = request(served.url, "POST", CHAT, {
            "model": bundled_model.info.name, "messages": [{"role": "user", "content": large}]},
            timeout_s=60)
        assert reply.status == 400
        error = reply.json()["error"]
        assert error["code"] == "context_length_exceeded"
        assert error["message"].startswith("The messages are at least ")
        assert "the context window is 8,192 tokens" in error["message"]
    finally:
        served.stop()
