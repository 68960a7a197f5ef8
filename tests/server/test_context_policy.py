"""A client whose history no longer fits the window: a 400 by default (as
OpenAI answers), the same policy as the chat where the request asks for it
(``context_policy``) or the server was started so (``serve --context-policy``):
the reply says what made room (``compaction``) and what was recalled."""

from __future__ import annotations

import pytest

from tests.server.conftest import request, serve

WINDOW = 768


def _history(turns: int) -> list[dict]:
    messages = [{"role": "user", "content": "My sister Ada lives in Lyon and bakes bread."},
                {"role": "assistant", "content": "Noted: Ada, Lyon, bread."}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"Question {i}: tell me about topic {i * 7}."},
                     {"role": "assistant", "content": f"Topic {i * 7} is a fine topic."}]
    return messages + [{"role": "user", "content": "Where does Ada live?"}]


def _ask(served, messages, **extra):
    return request(served.url, "POST", "/v1/chat/completions",
                   {"model": "tiny", "messages": messages, **extra})


@pytest.fixture
def served(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db", context_window=WINDOW)
    yield running
    running.stop()


def test_a_history_past_the_window_is_refused_unless_the_request_asks(served):
    long = _history(14)  # ~1,000 tokens of a byte-level vocabulary
    refused = _ask(served, long)
    assert refused.status == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    bad = _ask(served, long, context_policy="rotate")
    assert bad.status == 400 and "'context_policy' must be" in bad.json()["error"]["message"]
    answered = _ask(served, long, context_policy="compact")
    assert answered.status == 200, answered.body
    body = answered.json()
    assert body["compaction"].startswith("compacted: ")  # prepared in this turn: no idle time
    assert body["choices"][0]["message"]["content"] is not None
    branch = served.conv.store.get_session(served.conv.session.id).messages
    assert [m.role for m in branch].count("summary") == 1
    assert [m.content for m in branch if m.role == "user"][0] == long[0]["content"]  # kept
    # The next request goes on from the compacted branch and recalls what it needs.
    reply = body["choices"][0]["message"]
    follow = _ask(served, [*long, {"role": "assistant", "content": reply["content"]},
                           {"role": "user", "content": "In which city does my sister Ada live?"}],
                  context_policy="compact")
    assert follow.status == 200 and "compaction" not in follow.json()
    recalled = follow.json()["recalled"]
    assert recalled[0]["text"] == long[0]["content"] and recalled[0]["tokens"] > 0
    assert recalled[0]["message_id"] == next(m.id for m in branch if m.role == "user")
    dropped = _ask(served, long, context_policy="drop_oldest")
    assert dropped.status == 200 and "compaction" not in dropped.json()


def test_the_serve_flag_sets_the_policy_of_requests_that_name_none(tiny, tmp_path):
    from mlxchat.server.app import build_app
    from mlxchat.server.core.service import ChatService
    from mlxchat.server.runner import RunningServer

    from tests.server.conftest import Served, open_tiny

    conv = open_tiny(tiny, tmp_path / "s.db", context_window=WINDOW)
    service = ChatService(conv, store=conv.store, engine=conv.engine, idle_join_s=3600.0,
                          context_policy="compact")
    server = RunningServer(build_app(service), host="127.0.0.1", port=0).start()
    running = Served(conv, service, server)
    try:
        answered = _ask(running, _history(14))
        assert answered.status == 200 and answered.json()["compaction"].startswith("compacted")
        assert _ask(running, _history(14), context_policy="stop").status == 400
    finally:
        running.stop()


def test_every_route_takes_the_field_and_says_what_made_room(served):
    long = _history(14)
    anthropic = request(served.url, "POST", "/v1/messages", {
        "model": "tiny", "max_tokens": 8, "messages": long, "context_policy": "compact"})
    assert anthropic.status == 200, anthropic.body
    assert anthropic.json()["compaction"].startswith("compacted: ")
    ollama = request(served.url, "POST", "/api/chat", {
        "model": "tiny", "stream": False, "messages": long, "context_policy": "drop_oldest",
        "options": {"num_predict": 8}})
    assert ollama.status == 200, ollama.body
    assert "compaction" not in ollama.json()  # drop_oldest: nothing is summarized
    assert request(served.url, "POST", "/v1/messages", {
        "model": "tiny", "max_tokens": 8, "messages": long,
        "context_policy": 3}).status == 400
