"""What the transcript shows when a command puts the session on another branch
(/retry, /edit, /undo): the branch's messages, each new reply right after the
message it answers; what was said after messages that left the branch goes too."""

from __future__ import annotations

import pytest

from mlxchat.tui.widgets import AssistantMessage, NoticeMessage, UserMessage

from .app_support import ready, send, tiny_app, tiny_settings


def kinds(app) -> list[str]:
    names = {UserMessage: "user", AssistantMessage: "assistant", NoticeMessage: "notice"}
    return [next((n for t, n in names.items() if isinstance(w, t)), type(w).__name__)
            for w in app.transcript.children]


@pytest.mark.parametrize("command", ["/retry", "/edit Another question"])
async def test_a_new_reply_follows_its_message_with_no_older_notice_between(
        tmp_path, tiny, command):
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "Question")
        await send(pilot, "/get seed")  # a notice after the reply
        assert kinds(app)[-3:] == ["user", "assistant", "notice"]
        await send(pilot, command)
        assert kinds(app)[-2:] == ["user", "assistant"]
        assert app.transcript.children[-1].text  # the new reply, streamed
        await send(pilot, "/get seed")  # a notice after it stays after it
        await send(pilot, "/rename Renamed")  # a reload of the same branch
        assert kinds(app)[-4:] == ["user", "assistant", "notice", "notice"]
