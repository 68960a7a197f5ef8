"""Bad input to ``POST /v1/responses`` (a previous_response_id that does not
exist, a function_call_output with no call, malformed items, an oversized
encrypted_content, fields this server cannot honour): each a 4xx in OpenAI's
shape naming the field, with nothing stored and nothing prefilled; and a
reasoning item's encrypted_content read back only when it is ours."""

from __future__ import annotations

import pytest

from mlxchat.server.responses.sealed import MAX_SEALED_CHARS, seal

from tests.server.conftest import request, serve

PATH = "/v1/responses"
TOOL = {"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather",
        "arguments": '{"city": "Oslo"}'}


@pytest.fixture
def served(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db", max_tokens=3)
    yield running
    running.stop()


def _state(served) -> tuple:
    """What a refused request must leave as it was: the messages stored, the
    responses stored, and the last turn's figures (a prefill would change them)."""
    store = served.conv.store
    sessions = store.list_sessions()
    with store.db.reading() as cur:
        responses = cur.execute("SELECT COUNT(*) FROM api_responses").fetchone()[0]
    return (sum(s.message_count for s in sessions), responses,
            id(served.conv.turns.last_stats))


def _user(text: str = "hi") -> dict:
    return {"role": "user", "content": text}


BAD = [
    ({"input": []}, "input"),
    ({"input": 7}, "input"),
    ({"input": ["hi"]}, "input[0]"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
    ({"input": [{"type": "message", "role": "user"}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
     "input[0].content[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": 3}]}]},
     "input[0].content[0].text"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
     "input[0].content[0]"),
    ({"input": [_user(), {"role": "assistant", "content": "hello"}]}, "input"),
    ({"input": [_user(), {**CALL, "call_id": None}]}, "input[1].call_id"),
    ({"input": [_user(), {**CALL, "arguments": {"city": "Oslo"}}]}, "input[1].arguments"),
    ({"input": [_user(), {"type": "function_call_output", "call_id": "call_9",
                          "output": "x"}]}, "input[1].call_id"),
    ({"input": [_user(), CALL, {"type": "function_call_output", "call_id": "call_2",
                                "output": "x"}]}, "input[2].call_id"),
    ({"input": [_user(), CALL, {"type": "function_call_output", "call_id": "call_1"}]},
     "input[2].output"),
    ({"input": [_user(), {"type": "reasoning", "summary": [], "encrypted_content": 5},
                {"role": "assistant", "content": "x"}, _user()]},
     "input[1].encrypted_content"),
    ({"input": [_user(), {"type": "reasoning", "summary": [],
                          "encrypted_content": "x" * (MAX_SEALED_CHARS + 1)},
                {"role": "assistant", "content": "x"}, _user()]},
     "input[1].encrypted_content"),
    ({"input": "hi", "previous_response_id": "resp_nothing"}, "previous_response_id"),
    ({"input": "hi", "background": True}, "background"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation"),
    ({"input": "hi", "truncation": "auto"}, "truncation"),
    ({"input": "hi", "top_logprobs": 3}, "top_logprobs"),
    ({"input": "hi", "store": "yes"}, "store"),
    ({"input": "hi", "tools": [{"type": "function"}]}, "tools[0]"),
    ({"input": "hi", "tools": [TOOL, TOOL]}, "tools"),
    ({"input": "hi", "tools": [TOOL], "tool_choice": {"type": "web_search"}}, "tool_choice"),
    ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
    ({"input": "hi", "text": {"format": {"type": "json_schema"}}}, "text.format"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {
        "type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}}}, "text.format"),
    ({"input": "hi", "reasoning": {"effort": "huge"}}, "reasoning.effort"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "hi", "temperature": 3}, "temperature"),
    ({"input": "hi", "metadata": {"k": 1}}, "metadata"),
]


@pytest.mark.parametrize("body,param", BAD, ids=[p for _, p in BAD])
def test_bad_input_is_a_400_naming_it_with_nothing_stored_or_prefilled(served, body, param):
    before = _state(served)
    reply = request(served.url, "POST", PATH, {"model": "tiny", **body})
    assert reply.status == 400, reply.body[:300]
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"]
    assert _state(served) == before


def test_a_follow_up_on_a_stored_response_is_refused_whole(served):
    made = request(served.url, "POST", PATH, {"model": "tiny", "input": "hi",
                                              "max_output_tokens": 2}).json()
    before = _state(served)
    for body, param in [
        ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "x"}]},
         "input[0].call_id"),
        ({"input": [{"role": "assistant", "content": "more"}]}, "input"),
    ]:
        reply = request(served.url, "POST", PATH, {"model": "tiny",
                                                   "previous_response_id": made["id"], **body})
        assert (reply.status, reply.json()["error"]["param"]) == (400, param)
        assert _state(served) == before


def test_unknown_responses_are_404_in_openai_shape(served):
    for method, path in [("GET", f"{PATH}/resp_none"), ("DELETE", f"{PATH}/resp_none"),
                         ("GET", f"{PATH}/resp_none/input_items")]:
        reply = request(served.url, method, path)
        assert reply.status == 404 and "resp_none" in reply.json()["error"]["message"]
    made = request(served.url, "POST", PATH, {"model": "tiny", "input": "hi",
                                              "max_output_tokens": 2}).json()
    for query, param in [("?limit=0", "limit"), ("?order=up", "order"), ("?after=x", "after")]:
        reply = request(served.url, "GET", f"{PATH}/{made['id']}/input_items{query}")
        assert (reply.status, reply.json()["error"]["param"]) == (400, param)


def test_reasoning_sent_back_is_kept_only_when_it_is_ours(served):
    key = served.conv.store.responses.key()
    ours = seal(key, "I thought about it.")
    tampered = ours[:-3] + ("AAA" if not ours.endswith("AAA") else "BBB")
    for sealed, kept in [(ours, "I thought about it."), (tampered, None),
                         ("gAAAA-another-server", None)]:
        body = {"model": "tiny", "store": False, "max_output_tokens": 2, "input": [
            _user(f"hi {kept}"), {"type": "reasoning", "summary": [],
                                  "encrypted_content": sealed},
            {"role": "assistant", "content": "hello"}, _user("more")]}
        reply = request(served.url, "POST", PATH, body)
        assert reply.status == 200, reply.body[:300]
        stored = served.conv.messages[-3]
        assert (stored.role, stored.content, stored.reasoning) == ("assistant", "hello", kept)
