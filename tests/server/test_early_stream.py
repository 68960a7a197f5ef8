"""A stream starts before its prompt is read: Anthropic's ``message_start``
(with the prompt's usage) and OpenAI's role chunk go out before the prefill
ends, pings (comment lines before ``message_start``) keep the connection alive
while it runs, an error found after the status went out is an ``error``
event, and a request sent again while the first still computes joins it
(one prefill, both get the reply). The prefill is held on an event
(``held``): every wait is for a state, none for time."""

from __future__ import annotations

import json
import logging
import threading

import httpx
import pytest
from anthropic import Anthropic
from openai import OpenAI

from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.turn.pipeline import TurnPipeline
from tests.server.conftest import serve
from tests.server.test_anthropic import PNG
from tests.waiting import until

BODY = {"model": "tiny", "max_tokens": 6, "stream": True, "temperature": 0,
        "messages": [{"role": "user", "content": "Tell me about herons."}]}


class Held:
    """The prefill's chunks wait for ``release`` (the first PrefillProgress,
    and with it the plan, is out by then); ``feeding`` once one waits."""

    def __init__(self) -> None:
        self.feeding = threading.Event()
        self.release = threading.Event()
        self.turns = 0


@pytest.fixture
def held(monkeypatch):
    hold = Held()
    feed, run = LiveCache.feed, TurnPipeline.run

    def held_feed(self, model, tokens):
        hold.feeding.set()
        assert hold.release.wait(60), "never released"
        feed(self, model, tokens)

    def counted_run(self, *args, **kw):
        hold.turns += 1
        return run(self, *args, **kw)
    monkeypatch.setattr(LiveCache, "feed", held_feed)
    monkeypatch.setattr(TurnPipeline, "run", counted_run)
    yield hold
    hold.release.set()


@pytest.fixture
def fast_pings(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db", ping_s=0.05)
    yield running
    running.stop()


def events(lines) -> iter:
    """(name, data) of each server-sent event; a comment line as (':', text)."""
    name = None
    for line in lines:
        if line.startswith(":"):
            yield ":", line[1:].strip()
        elif line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            yield name, json.loads(line[len("data: "):])


def started(seen) -> tuple[str, dict]:
    """The first event that is not a comment line (those come while it waits)."""
    return next((name, data) for name, data in seen if name != ":")


def test_message_start_with_the_prompts_usage_goes_out_before_the_prefill_ends(served, held):
    with httpx.stream("POST", served.url + "/v1/messages", json=BODY, timeout=60) as reply:
        assert reply.status_code == 200
        seen = events(reply.iter_lines())
        name, start = started(seen)
        assert name == "message_start" and not held.release.is_set()  # the prompt is held
        planned = start["message"]["usage"]
        assert planned["input_tokens"] > 0 and planned["cache_read_input_tokens"] == 0
        held.release.set()
        rest = list(seen)
    end = next(data for name, data in rest if name == "message_delta")
    assert rest[-1][0] == "message_stop"
    # What message_start planned is what the turn computed.
    for field in ("input_tokens", "cache_read_input_tokens"):
        assert end["usage"][field] == planned[field]


def test_pings_keep_a_long_prefill_alive_and_the_sdk_reads_the_stream(fast_pings, held):
    with httpx.stream("POST", fast_pings.url + "/v1/messages", json=BODY,
                      timeout=60) as reply:
        seen = events(reply.iter_lines())
        names = []
        while names.count("ping") < 3:  # the prefill is held: only pings come
            names.append(next(seen)[0])
        planned = names.index("message_start")  # comment lines until it is planned
        assert set(names[:planned]) <= {":"} and set(names[planned + 1:]) == {"ping"}
        held.release.set()
        assert [n for n, _ in seen][-1] == "message_stop"
    held.release.clear()
    api = Anthropic(base_url=fast_pings.url, api_key="x", max_retries=0, timeout=60)
    got = []

    def stream() -> None:
        with api.messages.stream(model="tiny", max_tokens=6, extra_body={"temperature": 0},
                                 messages=[{"role": "user", "content": "And egrets?"}]) as s:
            for event in s:
                got.append(event.type)
                held.release.set()  # once message_start is in, with pings around it
    worker = threading.Thread(target=stream)
    worker.start()
    worker.join(60)
    assert got[0] == "message_start" and got[-1] == "message_stop"


def test_openai_streams_start_early_and_its_sdk_skips_the_comment_lines(fast_pings, held):
    api = OpenAI(base_url=fast_pings.url + "/v1", api_key="x", max_retries=0, timeout=60)
    chunks = []

    def stream() -> None:
        for chunk in api.chat.completions.create(
                model="tiny", max_tokens=6, temperature=0, stream=True,
                messages=[{"role": "user", "content": "Tell me about herons."}]):
            chunks.append(chunk)
    worker = threading.Thread(target=stream)
    worker.start()
    until(lambda: chunks)  # the role chunk, while the prefill is held
    assert not held.release.is_set() and chunks[0].choices[0].delta.role == "assistant"
    held.release.set()
    worker.join(60)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_an_error_found_after_the_status_went_out_is_an_error_event(fast_pings, held):
    first = threading.Thread(target=lambda: httpx.post(
        fast_pings.url + "/v1/messages", json={**BODY, "stream": False}, timeout=60))
    first.start()
    until(held.feeding.is_set)  # it holds the engine: the next waits in the queue
    image = {**BODY, "messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": PNG}}]}]}
    with httpx.stream("POST", fast_pings.url + "/v1/messages", json=image,
                      timeout=60) as reply:
        assert reply.status_code == 200  # started while it waited
        seen = events(reply.iter_lines())
        assert next(seen)[0] == ":"  # a comment line: it waits for the engine
        held.release.set()
        rest = list(seen)
    name, error = rest[-1]
    assert name == "error" and error["error"]["type"] == "invalid_request_error"
    assert "sees no images" in error["error"]["message"]
    assert "message_start" not in [n for n, _ in rest]
    first.join(60)


def test_a_request_sent_again_while_the_first_computes_joins_it(served, held, caplog):
    caplog.set_level(logging.INFO, logger="mlxchat.server.access")
    replies: list[dict] = []

    def ask() -> None:
        reply = httpx.post(served.url + "/v1/messages", json={**BODY, "stream": False},
                           timeout=60)
        replies.append(reply.json())
    first = threading.Thread(target=ask)
    first.start()
    until(held.feeding.is_set)
    again = threading.Thread(target=ask)
    again.start()
    until(lambda: served.service.shared.listening == 2)
    held.release.set()
    first.join(60)
    again.join(60)
    assert len(replies) == 2 and replies[0]["content"] == replies[1]["content"]
    assert replies[0]["usage"] == replies[1]["usage"]
    assert held.turns == 1  # one prefill, one reply computed for both
    session = served.conv.store.list_sessions()[0]
    roles = [m.role for m in served.conv.store.get_session(session.id).messages]
    assert roles == ["user", "assistant"]
    assert served.service.shared.listening == 0
    until(lambda: len([r for r in caplog.records if r.name == "mlxchat.server.access"]) == 2)
    lines = [r.getMessage() for r in caplog.records if r.name == "mlxchat.server.access"]
    assert sorted(line.endswith(" s") and " joined " in line for line in lines) == [False, True]


def test_a_client_that_left_while_its_prompt_was_read_finds_it_when_it_asks_again(served,
                                                                                   held):
    with httpx.stream("POST", served.url + "/v1/messages", json=BODY, timeout=60) as reply:
        assert started(events(reply.iter_lines()))[0] == "message_start"
    # It went away (a client's timeout) while the prompt is read: the turn waits for it.
    until(lambda: served.service.shared.listening == 0)
    assert served.service.shared.computing == 1
    replies = []
    again = threading.Thread(target=lambda: replies.append(httpx.post(
        served.url + "/v1/messages", json={**BODY, "stream": False}, timeout=60).json()))
    again.start()
    until(lambda: served.service.shared.listening == 1)
    held.release.set()
    again.join(60)
    assert replies[0]["type"] == "message" and held.turns == 1


def test_a_turn_nobody_comes_back_for_is_cancelled(tiny, tmp_path, held):
    served = serve(tiny, tmp_path / "s.db", rejoin_s=0.01)
    try:
        with httpx.stream("POST", served.url + "/v1/messages", json=BODY,
                          timeout=60) as reply:
            assert started(events(reply.iter_lines()))[0] == "message_start"
        until(lambda: served.service.shared.computing == 0)
        held.release.set()
        until(lambda: served.service.lane.running == 0)
        session = served.conv.store.list_sessions()[0]
        roles = [m.role for m in served.conv.store.get_session(session.id).messages]
        assert roles == ["user"]  # cancelled before a word: no reply stored
    finally:
        served.stop()


def test_a_stream_starts_while_its_request_is_still_prepared(fast_pings, monkeypatch):
    from mlxchat.server.core import tool_choice

    gate = threading.Event()
    compile_tools = tool_choice.compile_tools

    def held(*args, **kw):  # the tools' grammar compiles slowly on a busy machine
        assert gate.wait(60), "never released"
        return compile_tools(*args, **kw)
    monkeypatch.setattr(tool_choice, "compile_tools", held)
    tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": {
        "type": "object", "properties": {"city": {"type": "string"}}}}]
    with httpx.stream("POST", fast_pings.url + "/v1/messages", json={**BODY, "tools": tools},
                      timeout=60) as reply:
        assert reply.status_code == 200
        seen = events(reply.iter_lines())
        assert next(seen)[0] == ":" and not gate.is_set()  # out before it was prepared
        gate.set()
        assert [name for name, _ in seen][-1] == "message_stop"
