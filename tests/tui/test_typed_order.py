"""The transcript keeps the order things were typed in: a command typed right
after a message (in one burst: a paste, a script, a fast typist) answers
under that message, not above it, though the message is shown only once
committed."""

from __future__ import annotations

import threading

from textual._xterm_parser import XTermParser

from mlxchat.tui.widgets import UserMessage

from .app_support import ready, settle, tiny_app, until


async def test_a_command_typed_after_a_message_answers_under_it(tmp_path, tiny, monkeypatch):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        # The message's commit waits (a busy machine, a retrieval) until the
        # command typed after it has answered.
        committed, send = threading.Event(), app.conversation.turns.send
        monkeypatch.setattr(app.conversation.turns, "send",
                            lambda *a, **kw: committed.wait(30) and send(*a, **kw))
        for event in XTermParser().feed("Hello from make run\r/stats\r"):  # one read
            app.post_message(event)
        await until(lambda: len(app.transcript.query(".notice, TableNotice, MarkdownNotice")))
        committed.set()
        await settle(pilot)
        shown = list(app.transcript.children)
        kinds = [type(w).__name__ for w in shown]
        [sent] = [i for i, w in enumerate(shown) if isinstance(w, UserMessage)]
        assert sent == 0 and shown[sent].text == "Hello from make run", kinds
        assert len(shown) == 3 and "AssistantMessage" in kinds[1:], kinds  # and /stats's answer
        # A reload of the session (a command that changed it) keeps that order.
        await app.reload_session()
        await pilot.pause()
        assert [type(w).__name__ for w in app.transcript.children] == kinds
