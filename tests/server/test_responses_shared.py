"""The Responses route on what every route shares: its stream starts before the
prefill (``response.created``, then ``response.in_progress`` repeated while
the prompt is read: Codex skips comment lines and gives up on a silent
stream), a developer item after the first turn stands where it is (the one
rule of ``core.system_messages``), and a resent request joins the one in
progress only when it follows the same stored reply. The prefill is held on
an event (``held``): every wait is for a state, none for time."""

from __future__ import annotations

import threading

import httpx
import pytest

from mlxchat.server.core.api_turns import ApiRequest, IncomingMessage, _new_part
from mlxchat.server.core.requests import ChatRequest
from mlxchat.server.core.shared_reply import request_identity
from mlxchat.session.errors import ConversationError
from tests.server.test_early_stream import events, fast_pings, held  # noqa: F401 - fixtures
from tests.server.test_serve import client

BODY = {"model": "tiny", "input": "Tell me about herons.", "max_output_tokens": 6,
        "temperature": 0, "stream": True}


def test_the_stream_starts_before_the_prefill_and_says_in_progress_while_it_runs(
        fast_pings, held):  # noqa: F811
    with httpx.stream("POST", fast_pings.url + "/v1/responses", json=BODY,
                      timeout=60) as reply:
        assert reply.status_code == 200
        seen = events(reply.iter_lines())
        names, numbers = [], []
        while names.count("response.in_progress") < 3:  # the prefill is held
            name, data = next(seen)
            names.append(name)
            numbers.append(data["sequence_number"])
        assert not held.release.is_set()
        assert names[0] == "response.created" and set(names[1:]) == {"response.in_progress"}
        held.release.set()
        rest = list(seen)
    assert ":" not in [n for n, _ in rest] + names  # no comment lines: real events only
    numbers += [data["sequence_number"] for _, data in rest]
    assert numbers == list(range(len(numbers)))
    assert rest[-1][0] in ("response.completed", "response.incomplete")


def test_the_openai_sdk_reads_a_stream_whose_in_progress_repeats(fast_pings, held):  # noqa: F811
    api = client(fast_pings.url)
    got: list[str] = []

    def stream() -> None:
        with api.responses.stream(model="tiny", input="And egrets?", max_output_tokens=6,
                                  temperature=0) as s:
            for event in s:
                got.append(event.type)
                if got.count("response.in_progress") >= 3:
                    held.release.set()
    worker = threading.Thread(target=stream)
    worker.start()
    worker.join(60)
    assert not worker.is_alive()
    assert got[:3] == ["response.created", "response.in_progress", "response.in_progress"]
    assert "response.output_text.delta" in got
    assert got[-1] in ("response.completed", "response.incomplete")


def test_a_developer_item_after_the_first_turn_stands_where_it_is(served):
    api = client(served.url)
    first = api.responses.create(model="tiny", input="Tell me about herons.",
                                 max_output_tokens=4, temperature=0)
    follow = api.responses.create(
        model="tiny", previous_response_id=first.id, max_output_tokens=4, temperature=0,
        input=[{"role": "developer", "content": "Answer in French."},
               {"role": "user", "content": "And egrets?"}])
    conv = served.conv
    stored = conv.store.get_session(conv.session.id).messages
    assert [(m.role, m.content) for m in stored][2:4] == [
        ("system", "Answer in French."), ("user", "And egrets?")]
    prompt = conv.engine.loaded.tokenizer.decode(stored[2].token_ids)
    assert "<|im_start|>system\nAnswer in French.<|im_end|>" in prompt
    assert follow.usage.input_tokens_details.cached_tokens \
        == first.usage.input_tokens + first.usage.output_tokens  # the reply's KV reused
    inline = api.responses.create(
        model="tiny", store=False, max_output_tokens=4, temperature=0,
        input=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
               {"role": "developer", "content": "Be brief."},
               {"role": "user", "content": "More?"}])
    assert inline.status in ("completed", "incomplete")
    roles = [m.role for m in conv.store.get_session(conv.session.id).messages]
    assert roles == ["user", "assistant", "system", "user", "assistant"]


def test_results_after_a_stored_reply_may_come_with_a_system_message():
    new = [IncomingMessage("tool", "sunny", call_id="c1", tool_name="weather"),
           IncomingMessage("system", "Be brief.")]
    assert _new_part(new, after_reply=True) == new
    with pytest.raises(ConversationError):  # no reply before them to answer
        _new_part(new)


def test_follow_ups_to_different_responses_are_different_requests():
    said = [IncomingMessage("user", "And egrets?")]

    def asked(after: int, max_calls: int | None = None) -> str:
        turn = ApiRequest(None, said, {"max_tokens": 4}, after=after)
        return request_identity("tiny", ChatRequest("tiny", turn, True, max_calls=max_calls))
    assert asked(1) == asked(1)
    assert asked(1) != asked(2)
    assert asked(1) != asked(1, max_calls=1)
