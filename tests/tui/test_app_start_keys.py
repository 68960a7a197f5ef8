"""Keys typed while the app starts land in the input: they are queued before
the screen is mounted, and a message typed and sent then (its Enter turned
into ctrl+j by the terminal's cooked mode) goes once the model is ready."""

from __future__ import annotations

import asyncio

from textual._xterm_parser import XTermParser

from mlxchat.tui import pictures
from mlxchat.tui.app import MlxChatApp
from mlxchat.tui.widgets import UserMessage

from .app_support import ready, settle, tiny_factory, tiny_settings, until


class TypedEarly(MlxChatApp):
    """Keys the terminal delivered before the app mounted: in its queue when
    ``on_mount`` runs, as with a user typing while it started."""

    typed = ""

    def on_mount(self) -> None:
        # Textual then calls MlxChatApp.on_mount itself (handlers run down the
        # MRO): calling it here too started the app twice.
        for event in XTermParser().feed(self.typed):
            self.post_message(event)


def app_typed(tmp_path, tiny, typed: str) -> TypedEarly:
    app = TypedEarly(tiny_settings(), model_spec=None, now=lambda: 0.0,
                     conversation_factory=tiny_factory(tmp_path / "s.db", tiny),
                     continue_last=False, session=None, cursor_blink=False)
    app.typed = typed
    return app


async def test_keys_typed_while_the_app_starts_land_in_the_input(tmp_path, tiny):
    app = app_typed(tmp_path, tiny, "hello th\x7fhere")
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await until(lambda: app.prompt.text == "hello there")


async def test_keys_the_terminal_probe_read_come_before_the_drivers(tmp_path, tiny, monkeypatch):
    """The probe (pictures.probe) read 'Hello from ' while it waited for the
    terminal's reply; the driver read the rest after it: one message, whole."""
    monkeypatch.setattr(pictures, "_typed_ahead", "Hello from ")
    app = app_typed(tmp_path, tiny, "make run\n")
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await until(lambda: any(isinstance(w, UserMessage) for w in app.transcript.children))
        [sent] = [w for w in app.transcript.children if isinstance(w, UserMessage)]
        assert sent.text == "Hello from make run" and app.prompt.text == ""
        assert pictures.typed_ahead() == []  # replayed once


async def test_a_message_sent_while_the_app_starts_goes_once_the_model_is_ready(tmp_path, tiny):
    app = app_typed(tmp_path, tiny, "hello there\n")  # Enter, as cooked mode delivers it
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await until(lambda: any(isinstance(w, UserMessage) for w in app.transcript.children))
        await settle(pilot)
        [sent] = [w for w in app.transcript.children if isinstance(w, UserMessage)]
        assert sent.text == "hello there" and app.prompt.text == ""
        app.prompt.text = "one"
        await pilot.press("ctrl+j")  # once started, ctrl+j is a newline again
        assert app.prompt.text == "one\n"


class SlowOpening(MlxChatApp):
    """The session's first showing waits for the test: a message sent while it
    reloads the transcript must not be cleared off it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reloading = asyncio.Event()
        self.go_on = asyncio.Event()

    async def reload_session(self) -> None:
        if self.go_on.is_set():
            return await super().reload_session()
        load = self.transcript.load

        async def held_load(messages, **kwargs):  # the branch as it was read, shown late
            messages = list(messages)
            self.reloading.set()
            await self.go_on.wait()
            self.transcript.load = load
            await load(messages, **kwargs)
        self.transcript.load = held_load
        await super().reload_session()


async def test_a_message_sent_while_the_session_opens_stays_on_screen(tmp_path, tiny):
    app = SlowOpening(tiny_settings(), model_spec=None, now=lambda: 0.0,
                      conversation_factory=tiny_factory(tmp_path / "s.db", tiny),
                      continue_last=False, session=None, cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await asyncio.wait_for(app.reloading.wait(), 60)
        assert app.conversation is not None  # opened, not shown yet
        app.prompt.text = "sent early"
        await pilot.press("enter")
        app.go_on.set()
        await ready(pilot)
        await until(lambda: any(isinstance(w, UserMessage) for w in app.transcript.children))
        await until(lambda: not app.generating)
        [sent] = [w for w in app.transcript.children if isinstance(w, UserMessage)]
        assert sent.text == "sent early"
