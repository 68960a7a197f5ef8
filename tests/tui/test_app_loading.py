"""A message sent while the model is still loading waits, shown as pending, and
goes once the model is ready; escape withdraws it; a failed load gives it back."""

from __future__ import annotations

import threading
from functools import partial

from mlxchat.models import ModelError
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store
from mlxchat.tui.app import create_app
from mlxchat.tui.widgets import NoticeMessage, UserMessage
from mlxchat.tui.widgets.transcript import PendingMessage

from .app_support import NOW, settle, tiny_loader, tiny_settings, until

WAITING = "Hello while the model loads."


def gated_app(db, tiny, *, fail: bool = False):
    """The app on tiny, whose model load waits until the returned gate is set."""
    gate = threading.Event()
    load = tiny_loader(tiny)

    def slow(spec, progress=None):
        if not gate.wait(30):
            raise TimeoutError("the test never opened the gate")
        if fail:
            raise ModelError("the disk went away")
        return load(spec, progress)
    factory = partial(open_conversation, store_factory=lambda: open_store(db), load_model=slow)
    app = create_app(tiny_settings(), model_spec=None, conversation_factory=factory,
                     now=lambda: NOW, cursor_blink=False)
    return app, gate


def pending(app) -> list[str]:
    return [w.text for w in app.transcript.query(PendingMessage)]


async def queue_one(app, pilot) -> None:
    app.prompt.text = WAITING
    await pilot.press("enter")
    await until(lambda: pending(app) == [WAITING])
    assert app.queued == WAITING and app.prompt.text == "" and app.conversation is None


async def test_a_message_sent_while_loading_goes_once_the_model_is_ready(tmp_path, tiny):
    app, gate = gated_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await queue_one(app, pilot)
        # Only one waits: a second comes back to the input, as a refusal does.
        app.prompt.text = "And a second one."
        await pilot.press("enter")
        await until(lambda: app.prompt.area.selected_text == "And a second one.")
        assert app.queued == WAITING
        app.prompt.clear()
        gate.set()
        await settle(pilot)
        conv = app.conversation
        assert conv is not None and app.queued is None and not pending(app)
        assert [(m.role, m.content) for m in conv.messages][0] == ("user", WAITING)
        assert [m.role for m in conv.messages] == ["user", "assistant"]
        shown = [w.text for w in app.transcript.query(UserMessage)]
        assert shown == [WAITING]  # shown once, as sent


async def test_escape_withdraws_the_waiting_message(tmp_path, tiny):
    app, gate = gated_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await queue_one(app, pilot)
        await pilot.press("escape")
        await until(lambda: not pending(app))
        assert app.queued is None and app.prompt.text == WAITING
        gate.set()
        await settle(pilot)
        assert app.conversation is not None and app.conversation.messages == []


async def test_a_failed_load_gives_the_waiting_message_back(tmp_path, tiny):
    app, gate = gated_app(tmp_path / "s.db", tiny, fail=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await queue_one(app, pilot)
        gate.set()
        await settle(pilot)
        assert app.conversation is None and app.queued is None and not pending(app)
        assert app.prompt.text == WAITING
        notices = [str(w.render()) for w in app.transcript.query(NoticeMessage)]
        assert any("the disk went away" in n for n in notices)
        assert any("not sent" in n for n in notices)
