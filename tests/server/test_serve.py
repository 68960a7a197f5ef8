"""`mlxchat serve` on the tiny model, driven by the official OpenAI client and
raw HTTP: replies equal the conversation's own, stateless conversations
prefill only their new message (after a restart too), and disconnects cancel."""

from __future__ import annotations

import json
import socket
import threading
import time

import openai
import pytest
from openai import OpenAI

from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.server.core.reply_reader import ids_up_to
from mlxchat.session.lock import SessionLock

from tests.server.conftest import open_tiny, request, serve


def client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def direct_reply(tiny, tmp_path, text: str, max_tokens: int) -> str:
    conv = open_tiny(tiny, tmp_path / "direct.db", max_tokens)
    try:
        return next(e for e in conv.turns.send(text) if isinstance(e, TurnDone)).reply
    finally:
        conv.shutdown()


def test_replies_equal_the_conversations_own_at_temperature_0(tiny, tmp_path, served):
    expected = direct_reply(tiny, tmp_path, "What is MLX?", 12)
    api = client(served.url)
    messages = [{"role": "user", "content": "What is MLX?"}]
    whole = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                        max_tokens=12)
    assert whole.choices[0].message.content == expected
    assert whole.usage.completion_tokens == 12
    chunks = list(api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                              max_tokens=12, stream=True,
                                              stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    ollama = request(served.url, "POST", "/api/chat",
                     {"model": "tiny", "messages": messages, "stream": False,
                      "options": {"temperature": 0, "num_predict": 12}})
    assert ollama.status == 200 and ollama.json()["message"]["content"] == expected
    assert [m["name"] for m in request(served.url, "GET", "/api/tags").json()["models"]] \
        == ["tiny", "all-minilm:l6-v2"]  # the chat model, and the embedder
    assert [m.id for m in api.models.list().data] == ["tiny"]


def test_ollama_clients_may_add_the_latest_tag_to_the_models_name(served):
    # Ollama clients name a model listed without a tag as NAME:latest.
    def chat(model: str):
        return request(served.url, "POST", "/api/chat",
                       {"model": model, "messages": [{"role": "user", "content": "hi"}],
                        "stream": False, "options": {"num_predict": 2}})

    listed = request(served.url, "GET", "/api/tags").json()["models"][0]["name"]
    assert ":" not in listed
    latest = chat(f"{listed}:latest")
    assert latest.status == 200 and latest.json()["model"] == listed
    assert chat(f"{listed}:7b").status == 404  # another tag is another model
    assert chat(f"{listed}:latest:latest").status == 404


def _turn(api: OpenAI, messages: list[dict], text: str):
    messages.append({"role": "user", "content": text})
    reply = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                        max_tokens=8)
    messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    return reply.usage


def _check_reuse(served, usage, previous) -> None:
    """The cache supplied the whole earlier conversation; only the new message
    was prefilled, as the engine counted it."""
    stats = served.conv.turns.last_stats
    assert usage.prompt_tokens_details.cached_tokens == stats.reused_tokens
    assert usage.prompt_tokens == stats.prompt_tokens
    if previous is not None:
        assert stats.reused_tokens == previous.prompt_tokens + previous.completion_tokens
        user = served.conv.messages[-2]
        assert user.role == "user" and stats.prefilled_tokens == len(user.token_ids or [])


def test_a_stateless_conversation_prefills_only_each_new_message(served):
    api = client(served.url)
    messages: list[dict] = [{"role": "system", "content": "Be brief."}]
    previous = None
    for i in range(5):
        usage = _turn(api, messages, f"Question {i}: tell me about topic {i * 7}.")
        _check_reuse(served, usage, previous)
        if previous is not None:
            assert usage.prompt_tokens_details.cached_tokens \
                > previous.prompt_tokens_details.cached_tokens
        previous = usage
    listed = served.conv.store.list_sessions()
    assert len(listed) == 1 and listed[0].from_api and listed[0].message_count == 10
    assert listed[0].title.startswith("Question 0")


def test_after_a_restart_the_segments_supply_the_history(tiny, tmp_path):
    db = tmp_path / "s.db"
    messages: list[dict] = []
    first = serve(tiny, db)
    try:
        api = client(first.url)
        for i in range(3):
            previous = _turn(api, messages, f"Turn {i} before the restart.")
    finally:
        first.stop()
    again = serve(tiny, db)
    try:
        api = client(again.url)
        for i in range(2):
            usage = _turn(api, messages, f"Turn {i} after the restart.")
            _check_reuse(again, usage, previous)
            if i == 0:
                assert again.conv.turns.last_stats.cache_source == "snapshot"
            previous = usage
        assert len(again.conv.store.list_sessions()) == 1
    finally:
        again.stop()


def test_two_clients_interleaving_keep_exact_reuse(served):
    api = client(served.url)
    conversations: dict[str, list[dict]] = {"a": [], "b": []}
    last: dict[str, object] = {"a": None, "b": None}
    for i in range(3):
        for name, messages in conversations.items():
            usage = _turn(api, messages, f"Client {name}, message {i}.")
            _check_reuse(served, usage, last[name])
            last[name] = usage
    assert len(served.conv.store.list_sessions()) == 2


def test_a_named_session_is_found_by_header_or_user_field(served):
    api = client(served.url)
    api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                user="notes", max_tokens=4)
    reply = request(served.url, "POST", "/v1/chat/completions",
                    {"model": "tiny", "messages": [{"role": "user", "content": "other"}],
                     "max_tokens": 4}, headers={"X-Session": "notes"})
    assert reply.status == 200
    [session] = served.conv.store.list_sessions()
    assert session.title == "notes" and session.from_api
    assert len(served.conv.saved.branches()) == 2  # two conversations, two branches of one session


def _long_request(served, *, stream: bool) -> socket.socket:
    """A raw connection that asked for a long reply."""
    body = json.dumps({"model": "tiny", "stream": stream, "max_tokens": 1500,
                       "messages": [{"role": "user", "content": "Go on for a long time."}]})
    sock = socket.create_connection((served.server.host, served.server.port), timeout=30)
    sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  + body).encode())
    return sock


def _stored_reply(served):
    """The reply the turn stored once it ended (bounded wait)."""
    store, deadline = served.conv.store, time.monotonic() + 20
    while time.monotonic() < deadline:
        session = store.most_recent_session()
        if session.messages and session.messages[-1].role == "assistant":
            break
        time.sleep(0.05)
    return session.messages[-1]


def test_a_client_that_disconnects_cancels_and_keeps_the_partial_reply(served):
    sock = _long_request(served, stream=True)
    seen = b""
    while seen.count(b"data: ") < 4:
        seen += sock.recv(4096)
    assert seen.startswith(b"HTTP/1.1 200")
    sock.close()
    reply = _stored_reply(served)
    assert reply.role == "assistant" and reply.cancelled
    assert reply.stats.finish_reason == "cancelled" and 0 < reply.stats.generated_tokens < 1500


def test_a_reply_the_server_stops_mid_stream_ends_with_an_error_not_a_finish(served):
    stream = client(served.url).chat.completions.create(
        model="tiny", stream=True, max_tokens=1500,
        messages=[{"role": "user", "content": "Go on for a long time."}])
    chunks = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            chunks.append(chunk)
            if len(chunks) == 4:
                served.conv.turns.cancel()  # what stopping the server (ctrl-c, /serve off) does
    assert "The server stopped before the reply was finished" in str(caught.value)
    # The client never reads it as a finished reply.
    assert all(c.finish_reason is None for chunk in chunks for c in chunk.choices)
    reply = _stored_reply(served)
    assert reply.cancelled and reply.stats.finish_reason == "cancelled"


def _noting_text(served) -> threading.Event:
    """Set once a turn of the server has said its first text."""
    said, begin = threading.Event(), served.service.turns.begin

    def noted(events):
        for event in events:
            if isinstance(event, TextDelta):
                said.set()
            yield event

    def begin_noting(*args, **kwargs):
        turn = begin(*args, **kwargs)
        turn.events = noted(turn.events)
        return turn
    served.service.turns.begin = begin_noting
    return said


def test_a_client_that_asked_for_a_whole_reply_and_left_cancels_it(served):
    said = _noting_text(served)
    sock = _long_request(served, stream=False)
    assert said.wait(20)  # the reply has begun
    sock.close()  # before any byte of the reply: it is asked for whole
    reply = _stored_reply(served)
    assert reply.role == "assistant" and reply.cancelled
    assert reply.stats.finish_reason == "cancelled" and reply.stats.generated_tokens < 1500


def test_a_reply_cut_at_a_stop_string_is_stored_as_finished(served):
    api = client(served.url)
    ask = [{"role": "user", "content": "Say something."}]
    whole = api.chat.completions.create(model="tiny", messages=ask, max_tokens=8,
                                        temperature=0)
    text = whole.choices[0].message.content
    stop = text[3:5]
    cut = api.chat.completions.create(model="tiny", messages=ask, max_tokens=8, temperature=0,
                                      stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == text[:text.find(stop)]
    reply = served.conv.messages[-1]
    assert reply.content == cut.choices[0].message.content
    assert not reply.cancelled and reply.stats.finish_reason == "stop"
    # Its ids are cut where its text is: the stop string and what followed are not kept.
    assert served.conv.engine.loaded.tokenizer.decode(reply.token_ids) == reply.content
    assert len(reply.token_ids) < cut.usage.completion_tokens
    # Sent back as the client got it, the reply is found: the ledger goes on from
    # the cut, and only the rest is prefilled.
    ask += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": "Go"}]
    after = api.chat.completions.create(model="tiny", messages=ask, max_tokens=4)
    assert after.usage.prompt_tokens_details.cached_tokens \
        == cut.usage.prompt_tokens + len(reply.token_ids)
    assert not served.conv.messages[-2].ledger_start


def test_a_stopped_replys_ids_are_cut_where_its_text_is_or_dropped(tiny):
    tok = tiny.tokenizer
    ids = tok.encode("Thinking. Héllo there", add_special_tokens=False)
    kept = ids_up_to(tok, ids, "Héllo there", len("Hé"))
    assert kept is not None and tok.decode(kept) == "Thinking. Hé"
    assert ids_up_to(tok, ids, "not its text", 2) is None


def test_a_session_open_in_another_process_is_a_conflict(served):
    api = client(served.url)
    first = [{"role": "user", "content": "First conversation."}]
    first.append({"role": "assistant", "content": api.chat.completions.create(
        model="tiny", messages=first, max_tokens=4).choices[0].message.content})
    held = served.conv.session.id
    api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Other."}],
                                max_tokens=4)
    assert served.conv.session.id != held
    lock = SessionLock(served.conv.store.path, held)  # as another mlxchat would hold it
    try:
        busy = request(served.url, "POST", "/v1/chat/completions", {
            "model": "tiny", "max_tokens": 4,
            "messages": first + [{"role": "user", "content": "More."}]})
    finally:
        lock.release()
    assert busy.status == 409 and busy.json()["error"]["code"] == "session_busy"


def test_each_bad_request_gets_its_status_and_error(served):
    def error(body, path="/v1/chat/completions", **kw):
        reply = request(served.url, "POST", path, body, **kw)
        return reply.status, reply.json()["error"]

    status, err = error(b"{not json")
    assert status == 400 and err["code"] == "invalid_json"
    status, err = error({"model": "tiny"})
    assert status == 400 and err["param"] == "messages"
    status, err = error({"messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and err["param"] == "model"
    status, err = error({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                         "temperature": "hot"})
    assert status == 400 and err["param"] == "temperature"
    status, err = error({"model": "tiny", "messages": [{"content": "hi"}]})
    assert status == 400 and err["param"] == "messages[0].role"
    status, err = error({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 404 and err["code"] == "model_not_found"
    status, err = error({"model": "tiny", "messages": [{"role": "user", "content": "w " * 3000}]})
    assert status == 400 and err["code"] == "context_length_exceeded"
    assert "2,048" in err["message"]
    status, err = error(b"x" * (2 << 20))
    assert status == 413 and err["code"] == "request_too_large"
    status, err = error({"model": "tiny", "messages": "hi"}, path="/api/chat")
    assert status == 400 and "messages" in err  # Ollama's shape: the message alone
    assert request(served.url, "GET", "/v1/nothing").status == 404
    # Nothing of the refused requests was stored.
    assert served.conv.store.list_sessions() == [] or all(
        s.message_count == 0 for s in served.conv.store.list_sessions())


def test_a_key_is_checked_on_every_request(tiny, tmp_path):
    keyed = serve(tiny, tmp_path / "s.db", api_key="s3cret")
    try:
        assert request(keyed.url, "GET", "/v1/models").status == 401
        wrong = request(keyed.url, "GET", "/v1/models", headers={"Authorization": "Bearer no"})
        assert wrong.status == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        assert request(keyed.url, "GET", "/api/tags", headers={"x-api-key": "s3cret"}).status \
            == 200
        api = OpenAI(base_url=f"{keyed.url}/v1", api_key="s3cret", max_retries=0)
        assert api.models.list().data[0].id == "tiny"
    finally:
        keyed.stop()


@pytest.mark.parametrize("host, key", [("0.0.0.0", []), ("192.168.1.20", []),
                                       ("0.0.0.0", ["--api-key", ""])])
def test_a_bind_beyond_loopback_needs_a_key(host, key, monkeypatch):
    """Refused in one line, exit status 2; an empty key is no key (and says so
    without first warning that the key can be read by others)."""
    import subprocess
    import sys

    monkeypatch.delenv("MLXCHAT_API_KEY", raising=False)
    proc = subprocess.run([sys.executable, "-m", "mlxchat", "serve", "--host", host,
                           "--port", "0", *key], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "--api-key" in proc.stderr and proc.stderr.count("\n") == 1


def test_a_stop_string_ending_on_the_last_allowed_token_is_stored_as_a_stop(served):
    """The engine ends by max_tokens on the very token the stop string completes
    on: the client is told 'stop', and the stored reply says the same."""
    api = client(served.url)
    ask = [{"role": "user", "content": "Say something."}]
    text = api.chat.completions.create(model="tiny", messages=ask, max_tokens=8,
                                       temperature=0).choices[0].message.content
    stop = next(text[-n:] for n in range(1, len(text) + 1)
                if text.find(text[-n:]) == len(text) - n)  # first seen at the very end
    cut = api.chat.completions.create(model="tiny", messages=ask, max_tokens=8, temperature=0,
                                      stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    reply = served.conv.messages[-1]
    assert reply.content == cut.choices[0].message.content == text[:-len(stop)]
    assert not reply.cancelled and reply.stats.finish_reason == "stop"
    assert served.conv.engine.loaded.tokenizer.decode(reply.token_ids or []) == reply.content
