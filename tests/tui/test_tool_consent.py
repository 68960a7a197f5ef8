"""The app's tool loop, driven like a user: the consent dialog shows the call
(server, tool, arguments, the server's hints as its claims) and nothing runs
before its answer; a denied call's reason reaches the model; results show
folded (a click or ctrl+t unfolds them); escape stops a running call; once
the app is gone and its host closed (as `mlxchat` does) no server process is
left (asked of the OS)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from functools import partial

import pytest
from textual.widgets import Input, Static

from mlxchat.tui.app import create_app
from mlxchat.tui.screens import ToolConsentScreen
from mlxchat.tui.widgets.transcript import ToolResultMessage

from tests.scripted import Scripted
from tests.server.conftest import real_qwen3
from tests.tools.servers import children, host_for, qwen_call, ran, wait_gone

from .app_support import NOW, ready, tiny_factory, tiny_settings, until



@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return real_qwen3(tmp_path_factory.mktemp("qwen3-consent"))


def consent_shown(app):
    """The dialog is up and mounted: its safe answer has focus (on_mount ran)."""
    def shown():
        screen = app.screen
        return (isinstance(screen, ToolConsentScreen) and screen.focused is not None
                and screen.focused.id == "deny")
    return shown


async def test_consent_gates_each_call_and_results_show_folded(qwen3, tmp_path, monkeypatch):
    markers = tmp_path / "markers"
    markers.mkdir()
    before = set(children(os.getpid()))
    host = host_for(markers, tmp_path / "logs")
    processes = [p for r in set(children(os.getpid())) - before for p in (r, *children(r))]
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    settings = tiny_settings(200)
    settings.generation = replace(settings.generation, tools="t.write_note,t.get_weather,t.slow")
    # As `mlxchat` opens the app: the conversation gets the host, which is closed
    # once the app is gone.
    app = create_app(settings, conversation_factory=partial(
        tiny_factory(tmp_path / "s.db", qwen3), tool_host=host), now=lambda: NOW,
        cursor_blink=False)
    async with app.run_test(size=(110, 40)) as pilot:
        await ready(pilot)
        scripted.reply(qwen_call("write_note", text="rm -rf /"))
        app.prompt.text = "Note this"
        app.simulate_key("enter")
        await until(consent_shown(app), 60)
        dialog = app.screen
        assert dialog.query_one("#consent-tool", Static).render().plain == \
            "The model wants to run t.write_note"
        assert "may change or delete things (its own claim, not checked)" in \
            dialog.query_one("#consent-hints", Static).render().plain
        assert json.loads(dialog.query_one("#consent-arguments-text", Static).render().plain) \
            == {"text": "rm -rf /"}
        await pilot.pause(0.3)
        assert ran(markers, "write_note") == []  # nothing runs before the answer
        scripted.reply(qwen_call("get_weather", city="Oslo"))
        await pilot.press("r")
        assert dialog.query_one("#consent-reason", Input).has_focus
        for key in "a bad idea":  # letters type the reason: 'a' does not allow
            await pilot.press("space" if key == " " else key)
        await pilot.press("enter")
        await until(consent_shown(app), 60)  # the model's next call, after the denial
        assert ran(markers, "write_note") == []
        denied = app.query(ToolResultMessage).first()
        assert denied.block.render().plain.startswith("▸ tool · t.write_note · ")
        assert denied.block.render().plain.endswith("denied: a bad idea")
        stored = app.conversation.messages[2]
        assert stored.content == "The user denied this call: a bad idea. It did not run."
        scripted.reply(qwen_call("slow", seconds=30))
        await pilot.press("a")
        await until(consent_shown(app), 60)
        assert ran(markers, "get_weather") == ["Oslo"]
        await pilot.press("a")
        await until(lambda: ran(markers, "slow") != [], 30)
        app.simulate_key("escape")  # stops the call, and the loop
        await until(lambda: not app.generating, 30)
        results = list(app.query(ToolResultMessage))
        assert len(results) == 2
        weather = results[1].block
        assert "t.get_weather" in weather.render().plain and "Sunny" not in \
            weather.render().plain
        app.transcript.scroll_to_widget(weather, animate=False, top=True)
        await pilot.pause()
        await pilot.click(weather)
        assert weather.render().plain.splitlines()[1] == "> Sunny in Oslo, 21 C"
        await pilot.press("ctrl+t")  # the last fold: this result
        assert "Sunny" not in weather.render().plain
        notices = [n.render().plain for n in app.query(".notice")]
        assert any(n.startswith("Stopped at slow") for n in notices), notices
    host.close()
    assert processes and wait_gone(processes) == []  # every server stopped
