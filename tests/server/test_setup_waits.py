"""An API request whose setup waits for the compute lock (its branch's KV comes
back from disk while the chat's engine computes) ends when its client goes
away: the lane's slot is free at once, and the next request restores the
branch all the same."""

from __future__ import annotations

import json
import socket

import pytest

from mlxchat.server.beside import SharedServer
from mlxchat.server.options import ServeOptions
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store

from tests.server.conftest import request, tiny_settings
from tests.waiting import BOUND_S, until


@pytest.fixture
def chat(tmp_path, tiny):
    conv = open_conversation(tiny_settings(4), model_spec="tiny",
                             store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: tiny).conversation
    yield conv
    conv.shutdown()


@pytest.fixture
def shared(chat):
    server = SharedServer(chat, ServeOptions(port=0))
    yield server
    server.stop()


def ask(url: str, messages: list[dict]) -> dict:
    reply = request(url, "POST", "/v1/chat/completions",
                    {"model": "tiny", "messages": messages, "max_tokens": 4})
    assert reply.status == 200, reply.body
    return reply.json()


def send_raw(url_host: str, port: int, body: dict) -> socket.socket:
    data = json.dumps(body)
    sock = socket.create_connection((url_host, port), timeout=BOUND_S)
    sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                  + data).encode())
    return sock


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_gone_while_its_setup_waits_for_the_chat_frees_its_slot(chat, shared, stream):
    first = [{"role": "user", "content": "An API conversation."}]
    answered = ask(shared.url, first)
    reply = answered["choices"][0]["message"]["content"]
    history = answered["usage"]["prompt_tokens"] + answered["usage"]["completion_tokens"]
    ask(shared.url, [{"role": "user", "content": "Another one."}])  # the first one's KV: on disk
    more = first + [{"role": "assistant", "content": reply}, {"role": "user", "content": "More."}]
    compute, lane = shared.engine.compute, shared.service.lane
    api_session = next(s for s in chat.store.list_sessions() if s.title.startswith("An API"))
    stored = len(chat.store.get_session(api_session.id).messages)
    ticket = compute.acquire("chat")  # the chat's engine computes
    try:
        sock = send_raw(shared.server.host, shared.server.port,
                        {"model": "tiny", "messages": more, "max_tokens": 4, "stream": stream})
        until(lambda: compute.ahead_of("api") == ["chat"])  # restoring its branch waits
        assert len(chat.store.get_session(api_session.id).messages) == stored  # still setup
        sock.close()
        until(lambda: lane._running is None)  # while the chat still computes
        assert compute.ahead_of("api") == []
    finally:
        compute.release(ticket)
    again = ask(shared.url, more)
    assert again["choices"][0]["message"]["content"]
    # The branch's history came back from its segments: only the new message was prefilled.
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == history
    assert len(chat.store.get_session(api_session.id).messages) == stored + 2
