"""Parts of a request with no natural bound, each held to one before anything
runs: headers, the number of messages and of tools, a stop list, a session's
name, a model's name said back. Against the real server on 127.0.0.1; the
server stores nothing and goes on answering."""

from __future__ import annotations

import tempfile

from mlxchat.server.app import MAX_HEADER_BYTES
from mlxchat.server.core import images
from mlxchat.server.core.requests import MAX_MESSAGES, MAX_NAME_CHARS, MAX_TOOLS

from tests.server.conftest import WEATHER, request, serve

CHAT, OLLAMA = "/v1/chat/completions", "/api/chat"
HELLO = [{"role": "user", "content": "hi"}]


def _nothing_ran(served) -> None:
    assert served.service.answered == 0
    assert all(s.message_count == 0 for s in served.conv.store.list_sessions())
    assert request(served.url, "GET", "/v1/models").status == 200


def test_headers_past_the_limit_are_a_431_however_they_arrive(served):
    big = {"X-Big": "a" * (MAX_HEADER_BYTES + 1)}
    many = {f"X-H{n}": "v" for n in range(MAX_HEADER_BYTES // 8)}
    for headers in (big, many):
        reply = request(served.url, "POST", CHAT, {"model": "tiny", "messages": HELLO},
                        headers=headers)
        assert reply.status == 431
        assert reply.json()["error"]["code"] == "request_header_fields_too_large"
        ollama = request(served.url, "POST", OLLAMA, {"model": "tiny", "messages": HELLO},
                         headers=headers)
        assert ollama.status == 431
        assert ollama.json() == {"error": "The request's headers are over 16,384 bytes."}
    _nothing_ran(served)


def test_too_many_messages_or_tools_are_refused_before_they_queue(served):
    many = [{"role": "user" if n % 2 == 0 else "assistant", "content": "a"}
            for n in range(MAX_MESSAGES)] + HELLO
    for path in (CHAT, OLLAMA):
        reply = request(served.url, "POST", path, {"model": "tiny", "messages": many})
        assert reply.status == 400
        text = "'messages' may hold at most 2,048 messages; got 2,049."
        error = reply.json()["error"]
        assert error == text if path == OLLAMA else error["message"] == text
    tools = request(served.url, "POST", CHAT, {"model": "tiny", "messages": HELLO,
                                               "tools": [WEATHER] * (MAX_TOOLS + 1)})
    assert tools.status == 400 and tools.json()["error"]["param"] == "tools"
    stops = request(served.url, "POST", CHAT, {"model": "tiny", "messages": HELLO,
                                               "stop": ["x"] * 10_000})
    assert stops.status == 400 and stops.json()["error"]["param"] == "stop"
    _nothing_ran(served)


def test_a_session_name_is_bounded(served):
    long = "u" * (MAX_NAME_CHARS + 1)
    by_field = request(served.url, "POST", CHAT, {"model": "tiny", "messages": HELLO,
                                                  "user": long})
    assert by_field.status == 400 and by_field.json()["error"]["param"] == "user"
    by_header = request(served.url, "POST", CHAT, {"model": "tiny", "messages": HELLO},
                        headers={"X-Session": long})
    assert by_header.status == 400 and by_header.json()["error"]["param"] == "X-Session"
    _nothing_ran(served)
    fits = request(served.url, "POST", CHAT, {"model": "tiny", "messages": HELLO,
                                              "max_tokens": 2, "user": "u" * MAX_NAME_CHARS})
    assert fits.status == 200


def test_an_unknown_model_name_is_said_back_cut_short(served):
    reply = request(served.url, "POST", CHAT, {"model": "m" * 1_000_000, "messages": HELLO})
    assert reply.status == 404 and len(reply.body) < 1000
    assert reply.json()["error"]["message"] == (
        f"The model '{'m' * 200}…' does not exist; this server runs 'tiny'.")
    _nothing_ran(served)


def test_the_most_messages_a_request_holds_past_the_window_leave_no_session(tiny, tmp_path):
    """2,048 messages (a chain past SQLite's trigger depth) refused for the
    window: the session made for them is deleted whole, and the server goes on."""
    narrow = serve(tiny, tmp_path / "n.db", context_window=256)
    most = [{"role": "user" if n % 2 == 0 else "assistant", "content": "a"}
            for n in range(MAX_MESSAGES - 1)] + HELLO
    try:
        reply = request(narrow.url, "POST", CHAT, {"model": "tiny", "messages": most,
                                                   "max_tokens": 2})
        assert reply.status == 400
        assert "the context window is 256" in reply.json()["error"]["message"]
        store = narrow.conv.store
        assert all(store.all_messages(s.id) == [] for s in store.list_sessions())
        fits = request(narrow.url, "POST", CHAT, {"model": "tiny", "messages": HELLO,
                                                  "max_tokens": 2})
        assert fits.status == 200
    finally:
        narrow.stop()


def test_text_only_messages_need_no_temporary_folder(tmp_path, monkeypatch):
    """Each message's images are checked in a temporary folder; a message with
    none makes none (a 2,000-message history made and removed 2,000)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    assert images.keep((), sees=False, model="tiny") == ()
