"""The API served beside the chat (`/serve`, `mlxchat serve --tui`): the real
app on the tiny model, a real server on a free 127.0.0.1 port driven by the
official openai client, stopped (bounded) by the app."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import replace
from functools import partial

import pytest
from openai import OpenAI

from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TextDelta
from mlxchat.server.options import ServeOptions
from mlxchat.store import open_store
from mlxchat.tui.widgets import NoticeMessage

from .app_support import ready, send, settle, tiny_app, tiny_settings, until


def client(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


async def ask(url: str, messages: list[dict], max_tokens: int = 4):
    """An API request from another thread while the app keeps running."""
    api = client(url)
    return await asyncio.to_thread(partial(api.chat.completions.create, model="tiny",
                                           messages=messages, max_tokens=max_tokens))


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def notices(app) -> list[str]:
    return [str(n.render()) for n in app.transcript.query(NoticeMessage)]


async def command(pilot, line: str) -> None:
    pilot.app.prompt.text = line
    await pilot.press("enter")
    await settle(pilot)


class CountedEngine(ChatEngine):
    """A real engine whose turns are counted as they run, by every engine of
    the test together: how many at once, and which engines ran one."""

    running = 0
    most_at_once = 0
    owners: list[str] = []
    entered = threading.Event()
    _guard = threading.Lock()

    def __init__(self, loaded, *, compute_owner: str = "chat", **options):
        super().__init__(loaded, compute_owner=compute_owner, **options)
        self.owner = compute_owner

    def _turn(self, planned, settings, emit, *asked):
        cls = CountedEngine
        with cls._guard:
            cls.running += 1
            cls.most_at_once = max(cls.most_at_once, cls.running)
            cls.owners.append(self.owner)
        cls.entered.set()

        def paced(event):  # the API's reply outlasts the watch's tick on any machine
            if self.owner == "api" and isinstance(event, TextDelta):
                time.sleep(0.005)
            emit(event)
        try:
            return super()._turn(planned, settings, paced, *asked)
        finally:
            with cls._guard:
                cls.running -= 1


async def test_serve_answers_on_the_same_weights_and_the_chat_stays_warm(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings(max_tokens=4))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        conv = app.conversation
        await send(pilot, "Hello there, chat.")
        held = conv.views.state().cached_tokens
        await command(pilot, "/serve 0")
        server = app.serving.running
        assert server is not None and server.url.startswith("http://127.0.0.1:")
        assert server.engine is not conv.engine
        assert server.engine.loaded.model is conv.engine.loaded.model  # one copy of the weights
        assert f"serving {server.url}" in app.sub_title
        reply = await ask(server.url, [{"role": "user", "content": "Hi from a client."}])
        assert reply.choices[0].message.content is not None and reply.usage.completion_tokens
        # The chat's cache was not touched: its next turn prefills only its new message.
        assert conv.views.state().cached_tokens == held
        await send(pilot, "And a second one.")
        stats = conv.turns.last_stats
        assert stats.cache_source == "warm" and stats.reused_tokens == held, stats
        # ...and the API's: the conversation sent back prefills only its new message.
        again = await ask(server.url, [
            {"role": "user", "content": "Hi from a client."},
            {"role": "assistant", "content": reply.choices[0].message.content},
            {"role": "user", "content": "More."}])
        assert again.usage.prompt_tokens_details.cached_tokens \
            == reply.usage.prompt_tokens + reply.usage.completion_tokens
        # The KV gauge adds the API engine's cache on a line of its own.
        await until(lambda: app.gauges.state.api_kv_bytes == server.kv_bytes() > 0)
        assert "+ API server" in str(app.gauges.query_one("#kv-text").render())
        await command(pilot, "/serve")
        assert "2 requests answered" in notices(app)[-1]
        port = server.server.port
        await command(pilot, "/serve off")
        assert app.serving.running is None and refused(port)
        assert "serving" not in app.sub_title
        assert not server.engine._worker.alive()


async def test_quitting_the_app_stops_the_server(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny, serve=ServeOptions(port=0))  # serve --tui
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        server = app.serving.running
        assert server is not None
        assert any(server.url in text for text in notices(app))
        reply = await ask(server.url, [{"role": "user", "content": "Hello."}])
        assert reply.choices[0].finish_reason in ("stop", "length")
        port = server.server.port
        timer, stopped_on = app.serving._timer, []
        stop_timer = timer.stop
        timer.stop = lambda: stopped_on.append(threading.current_thread()) or stop_timer()
        ui_thread = threading.current_thread()
        await pilot.press("ctrl+q")
    assert refused(port)
    assert stopped_on == [ui_thread]  # a Textual timer is stopped on the UI thread
    assert not server.engine._worker.alive() and app.serving.running is None


async def test_two_turns_never_compute_at_once_and_the_chat_says_it_waits(tmp_path, tiny):
    CountedEngine.owners.clear()
    CountedEngine.most_at_once = 0
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings(max_tokens=4),
                   engine_factory=CountedEngine)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        app.serving.control.engine_factory = partial(CountedEngine, compute_owner="api")
        # One at a time (--parallel 1): the chat takes turns with the API, not batched.
        app.serving.control.defaults = replace(app.serving.defaults, parallel=1)
        await command(pilot, "/serve 0")
        server = app.serving.running
        compute = server.engine.compute
        assert compute is app.conversation.engine.compute
        before = compute.figures()
        CountedEngine.entered.clear()
        # A long API reply first; the chat's turn, sent while it runs, waits behind it.
        api_reply = asyncio.ensure_future(ask(server.url, [
            {"role": "user", "content": "Tell me a long story."}], max_tokens=400))
        await asyncio.to_thread(CountedEngine.entered.wait, 30)
        app.prompt.text = "Meanwhile, in the chat."
        app.simulate_key("enter")
        await until(lambda: "waiting for the API to finish a request" in app.activity.label)
        reply = await asyncio.wait_for(api_reply, 60)
        await until(lambda: not app.generating, 60)
        await settle(pilot)
        assert reply.usage.completion_tokens > 0
        assert app.conversation.messages[-1].role == "assistant"
        assert not app.activity.active
        after = compute.figures()
        assert after.waited > before.waited and after.holds >= before.holds + 2  # both turns
    assert CountedEngine.most_at_once == 1
    assert "api" in CountedEngine.owners and "chat" in CountedEngine.owners
    # The API's turn entered first; the chat's ran after it, not beside it.
    assert CountedEngine.owners.index("api") < CountedEngine.owners.index("chat")


class GatedEngine(ChatEngine):
    """A real engine whose turns, holding the compute lock, wait for ``go``."""

    entered = threading.Event()
    go = threading.Event()

    def _turn(self, planned, settings, emit, *asked):
        GatedEngine.entered.set()
        assert GatedEngine.go.wait(60)
        return super()._turn(planned, settings, emit, *asked)


async def test_stop_while_the_chat_waits_for_the_api_ends_the_turn_at_once(tmp_path, tiny):
    GatedEngine.entered.clear()
    GatedEngine.go.clear()
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings(max_tokens=4))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        app.serving.control.engine_factory = partial(GatedEngine, compute_owner="api")
        app.serving.control.defaults = replace(app.serving.defaults, parallel=1)  # its one slot
        await command(pilot, "/serve 0")
        server = app.serving.running
        conv = app.conversation
        try:
            api_reply = asyncio.ensure_future(ask(server.url, [
                {"role": "user", "content": "A client first."}]))
            await asyncio.to_thread(GatedEngine.entered.wait, 30)
            app.prompt.text = "Meanwhile, in the chat."
            app.simulate_key("enter")
            await until(lambda: "waiting for the API to finish a request" in app.activity.label)
            await pilot.press("escape")  # Stop, while the API's turn still holds the engine
            await until(lambda: not app.generating, 5)
            await settle(pilot)
            assert not api_reply.done()
            await until(lambda: not app.activity.active, 5)
            # The user's message is kept; no reply was stored for a turn that never ran.
            conv.reload()
            assert [(m.role, m.content) for m in conv.messages][-1] == (
                "user", "Meanwhile, in the chat.")
        finally:
            GatedEngine.go.set()
        reply = await asyncio.wait_for(api_reply, 60)
        assert reply.choices[0].message.content is not None
        await send(pilot, "And now the chat answers.")
        assert conv.messages[-1].role == "assistant" and not conv.messages[-1].cancelled


async def test_an_api_session_opened_in_the_chat_is_handed_over_not_shared(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings(max_tokens=4))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await command(pilot, "/serve 0")
        server = app.serving.running
        first = [{"role": "user", "content": "An API conversation."}]
        reply = await ask(server.url, first)
        api_session = server.conversation.session.id
        # Between requests the server lets go of it: the chat may open it.
        await command(pilot, f"/open #{api_session}")
        conv = app.conversation
        assert conv.session.id == api_session
        shown = [(m.id, m.content) for m in conv.messages]
        more = first + [{"role": "assistant", "content": reply.choices[0].message.content},
                        {"role": "user", "content": "More."}]
        busy = client(server.url).chat.completions.with_raw_response
        with pytest.raises(Exception) as refused_request:
            await asyncio.to_thread(partial(busy.create, model="tiny", messages=more,
                                            max_tokens=4))
        assert getattr(refused_request.value, "status_code", None) == 409
        assert "in use by another part of this mlxchat" in str(refused_request.value)
        conv.reload()
        assert [(m.id, m.content) for m in conv.messages] == shown  # untouched
        # The chat goes on in it; once it leaves, the API continues there again.
        await send(pilot, "A word from the chat.")
        await command(pilot, "/new")
        after = await ask(server.url, more)
        assert server.conversation.session.id == api_session
        assert after.choices[0].message.content is not None


@pytest.mark.parametrize("line, words", [
    ("/serve abc", "a port is 0 to 65535"),
    ("/serve 70000", "a port is 0 to 65535"),
    ("/serve 0.0.0.0:0", "needs a key given on the command line"),
])
async def test_bad_serve_input_is_one_line_and_starts_nothing(tmp_path, tiny, line, words):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await command(pilot, line)
        text = notices(app)[-1]
        assert words in text and "\n" not in text.strip()
        assert app.serving.running is None


async def test_serving_twice_is_refused(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await command(pilot, "/serve 0")
        url = app.serving.running.url
        await command(pilot, "/serve 0")
        assert f"Already serving at {url}" in notices(app)[-1]
        await command(pilot, "/serve off")
        await command(pilot, "/serve off")
        assert notices(app)[-1].endswith("Not serving.")


class PacedEngine(ChatEngine):
    """A real engine that takes 5 ms more per streamed piece (on its own
    thread, so its decode is slower, not faked): a long reply is still
    running when the app quits however fast this machine is."""

    def _turn(self, planned, settings, emit, *asked):
        def paced(event):
            if isinstance(event, TextDelta):
                time.sleep(0.005)
            emit(event)
        return super()._turn(planned, settings, paced, *asked)


async def test_a_request_running_at_quit_is_cut_and_stored_as_stopped(tmp_path, tiny):
    db = tmp_path / "s.db"
    app = tiny_app(db, tiny)
    streamed = threading.Event()
    pieces: list[str] = []

    def stream_a_long_reply(url: str) -> None:
        chunks = client(url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Tell me a long story."}],
            max_tokens=2000, stream=True)
        try:
            for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                    streamed.set()
        except Exception:  # noqa: BLE001 - the server went away mid-stream: expected
            pass

    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        app.serving.control.engine_factory = partial(PacedEngine, compute_owner="api")
        await command(pilot, "/serve 0")
        server = app.serving.running
        reader = threading.Thread(target=stream_a_long_reply, args=(server.url,), daemon=True)
        reader.start()
        assert await asyncio.to_thread(streamed.wait, 30)
        api_session = server.conversation.session.id
        app.simulate_key("ctrl+q")
        await until(lambda: not app.is_running, 60)
    reader.join(30)
    store = open_store(db)
    try:
        reply = store.get_session(api_session).messages[-1]
    finally:
        store.close()
    assert reply.role == "assistant" and reply.cancelled
    assert reply.content.startswith("".join(pieces)) and reply.content


@pytest.fixture(scope="module")
def tiny_b(tmp_path_factory):
    """Another tiny model the chat can switch to."""
    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model

    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-b"), seed=1),
                       name="tiny-b", spec="tiny-b")


async def test_model_switch_while_serving_moves_the_server_to_the_new_model(tmp_path, tiny,
                                                                           tiny_b):
    app = tiny_app(tmp_path / "s.db", tiny, tiny_b)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await command(pilot, "/serve 0")
        old = app.serving.running
        await command(pilot, "/model tiny-b")
        new = app.serving.running
        assert new is not old and new.url == old.url
        assert notices(app)[-1] == f"The API server at {old.url} now serves tiny-b, as the chat does."
        assert not old.engine._worker.alive()  # the old model's engine and weights let go
        assert new.engine.loaded.model is app.conversation.engine.loaded.model
        reply = await asyncio.to_thread(partial(
            client(new.url).chat.completions.create, model="tiny-b",
            messages=[{"role": "user", "content": "Hello."}], max_tokens=4))
        assert reply.model == "tiny-b" and reply.choices[0].finish_reason in ("stop", "length")
        await command(pilot, "/serve")
        assert "Serving tiny-b" in notices(app)[-1]
