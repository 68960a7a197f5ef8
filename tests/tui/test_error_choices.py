"""An error that names what to choose from: its one line first, then every
choice, wrapped, none cut."""

from __future__ import annotations

from mlxchat.commands.tuning import SETTINGS
from mlxchat.tui.widgets import NoticeMessage

from .app_support import ready, send, tiny_app


async def test_unknown_setting_lists_every_name_under_the_error(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await send(pilot, "/set foo 1")
        notice = app.transcript.children[-1]
        assert isinstance(notice, NoticeMessage) and notice.level == "error"
        first, rest = str(notice.render()).split("\n", 1)
        assert first.startswith("Unknown setting 'foo'.")
        assert rest.replace("\n", " ").split(", ") == [*list(SETTINGS)[:-1],
                                                      list(SETTINGS)[-1] + "."]
        assert app.prompt.text == "/set foo 1"  # given back to correct
