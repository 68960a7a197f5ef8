"""The API served beside a chat (``server/beside.py``) without the app: the
shared weights are the chat's model only, the API engine never re-casts them,
a failed start leaves no thread behind, the server follows the chat's model,
and a request whose setup waits for the chat's engine ends when its client
goes away (the slot free at once, the branch restored by the next request)."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import replace

import pytest

from mlxchat.models import load_folder, precision
from mlxchat.models.testing.text import write_tiny_model
from mlxchat.server.beside import ServeControl, SharedServer
from mlxchat.server.options import ServeOptions
from mlxchat.server.runner import ServerFailed
from mlxchat.session.lock import SessionLock
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store

from tests.commands.conftest import send
from tests.server.conftest import request, tiny_settings
from tests.waiting import BOUND_S, until


@pytest.fixture(scope="module")
def tiny_d(tmp_path_factory):
    """Another random llama with the same tokenizer: a draft for ``tiny``."""
    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-d"), seed=1),
                       name="tiny-d", spec="tiny-d")


@pytest.fixture
def chat(tmp_path, tiny, tiny_d):
    models = {m.info.spec: m for m in (tiny, tiny_d)}
    conv = open_conversation(tiny_settings(4), model_spec="tiny",
                             store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: models[spec]).conversation
    yield conv
    conv.shutdown()


@pytest.fixture
def shared(chat):
    """One slot (``--parallel 1``): these tests reach into it."""
    server = SharedServer(chat, ServeOptions(port=0, parallel=1))
    yield server
    server.stop()


def test_the_api_loads_a_draft_as_itself_not_as_the_chat_model(shared, tiny, tiny_d):
    api = shared.conversation
    assert api.speculation.set_draft("tiny-d") == "tiny-d"
    assert api.engine.draft_spec == "tiny-d"
    assert api.engine.draft_info.name == "tiny-d"


def lanes() -> int:
    return sum(t.name.startswith("mlxchat-api-lane") and t.is_alive()
               for t in threading.enumerate())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # uvicorn's exit
def test_a_server_that_cannot_bind_leaves_no_thread_behind(chat):
    before = lanes()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ServerFailed, match="is the port in use"):
            SharedServer(chat, ServeOptions(port=taken.getsockname()[1]))
    assert lanes() == before


@pytest.fixture
def own_chat(tmp_path):
    """A chat on a tiny model of its own: the test casts its arrays."""
    loaded = load_folder(write_tiny_model(tmp_path / "m"), name="tiny", spec="tiny",
                         available=None)
    conv = open_conversation(tiny_settings(4), model_spec="tiny",
                             store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: loaded).conversation
    yield conv
    conv.shutdown()


def answering(server: SharedServer):
    """The engine of the slot that answered last: one conversation here, the
    slot holding the most of it."""
    return max(server.service.slots.all, key=lambda s: len(s.conv.messages)).engine


def ask(url: str, messages: list[dict], model: str = "tiny") -> dict:
    reply = request(url, "POST", "/v1/chat/completions",
                    {"model": model, "messages": messages, "max_tokens": 4})
    assert reply.status == 200, reply.body
    return reply.json()


def test_the_api_computes_in_the_chats_dtype_and_never_recasts_the_shared_weights(own_chat):
    chat = own_chat
    send(chat, "Hello from the chat.")
    chat.update_generation(replace(chat.generation, compute_dtype="float16"))
    send(chat, "Now in float16.")
    assert chat.engine.state().compute_dtype == "float16"
    server = SharedServer(chat, ServeOptions(port=0))
    try:
        first = [{"role": "user", "content": "A client."}]
        reply = ask(server.url, first)["choices"][0]["message"]["content"]
        # The API session's own settings say the default (float32): it computes
        # in what the weights hold instead of casting them back.
        assert precision.current_dtype(chat.engine.loaded.model) == "float16"
        assert answering(server).state().compute_dtype == "float16"
        done = send(chat, "The chat again.")
        assert done.stats.cache_source == "warm" and done.stats.miss_reason is None, done.stats
        # The chat goes back to float32: the API follows, its own cache reset.
        chat.update_generation(replace(chat.generation, compute_dtype=None))
        send(chat, "Back in float32.")
        again = ask(server.url, first + [{"role": "assistant", "content": reply},
                                         {"role": "user", "content": "More."}])
        assert answering(server).state().compute_dtype == "float32"
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert precision.current_dtype(chat.engine.loaded.model) == "float32"
        assert send(chat, "Still warm.").stats.cache_source == "warm"
    finally:
        server.stop()


def test_a_session_taken_between_the_check_and_the_open_is_left_as_it_was(chat, shared):
    """The chat opens an API session just after the API checked it was free:
    the API refuses (409) without having moved that session's leaf."""
    first = [{"role": "user", "content": "An API conversation."}]
    reply = ask(shared.url, first)["choices"][0]["message"]["content"]
    more = first + [{"role": "assistant", "content": reply}, {"role": "user", "content": "More."}]
    ask(shared.url, more)
    api_session = shared.conversation.session.id
    ask(shared.url, [{"role": "user", "content": "Another conversation."}])  # the API moves on
    leaf = chat.store.get_session(api_session).leaf_id
    api = shared.conversation
    checked = api.check_free
    taken: list[SessionLock] = []

    def chat_opens_it_in_the_gap(session_id: int) -> None:
        checked(session_id)
        taken.append(SessionLock(chat.store.path, session_id, holder="the chat"))
    api.check_free = chat_opens_it_in_the_gap
    try:
        branch = first + [{"role": "assistant", "content": reply},
                          {"role": "user", "content": "Another branch."}]
        refused = request(shared.url, "POST", "/v1/chat/completions",
                          {"model": "tiny", "messages": branch, "max_tokens": 4})
    finally:
        for lock in taken:
            lock.release()
    assert taken and refused.status == 409, refused.body
    assert chat.store.get_session(api_session).leaf_id == leaf


def test_a_server_beside_the_chat_follows_its_model_switch(chat):
    control = ServeControl(ServeOptions(port=0))
    old = control.start(chat)
    try:
        assert control.follow(chat) is None and control.running is old  # nothing changed
        first = [{"role": "user", "content": "Before the switch."}]
        assert ask(old.url, first)["model"] == "tiny"
        chat.switch_model("tiny-d")
        notice = control.follow(chat)
        new = control.running
        assert notice == f"The API server at {old.url} now serves tiny-d, as the chat does."
        assert new is not old and new.url == old.url
        # The old engine is closed (its KV and its hold on the old weights gone);
        # the new one computes on the chat's new weights, no copy.
        assert not old.engine._worker.alive()
        assert new.engine.loaded.model is chat.engine.loaded.model
        answered = ask(new.url, [{"role": "user", "content": "After the switch."}],
                       model="tiny-d")
        assert answered["model"] == "tiny-d" and answered["choices"][0]["message"]["content"]
        gone = request(new.url, "POST", "/v1/chat/completions",
                       {"model": "tiny", "messages": first, "max_tokens": 4})
        assert gone.status == 404, gone.body
    finally:
        control.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # uvicorn's exit
def test_a_server_that_cannot_follow_says_how_to_start_it_again(chat):
    control = ServeControl(ServeOptions(port=0))
    old = control.start(chat)
    chat.switch_model("tiny-d")
    with socket.socket() as taken:  # another program takes the port meanwhile
        old.server.stop()
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", old.server.port))
        taken.listen()
        notice = control.follow(chat)
    assert control.running is None and not old.engine._worker.alive()
    assert notice.startswith(f"The API server stopped serving tiny at {old.url}")
    assert notice.endswith("/serve starts it again.")


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
        until(lambda: lane.running == 0)  # while the chat still computes
        assert compute.ahead_of("api") == []
    finally:
        compute.release(ticket)
    again = ask(shared.url, more)
    assert again["choices"][0]["message"]["content"]
    # The branch's history came back from its segments: only the new message was prefilled.
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == history
    assert len(chat.store.get_session(api_session.id).messages) == stored + 2
