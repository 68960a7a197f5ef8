"""F1 and /help: every command with its meaning, by topic, whole at 80 and 160
columns (wrapped, never cut)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from textual.widgets import Static

from mlxchat.tui.screens import HelpScreen

from .app_support import ready, send, tiny_app


def shown_words(widget: Static) -> set[str]:
    """The words a Static shows at the width it has on screen."""
    console = Console(width=widget.content_region.width, file=io.StringIO(), record=True)
    console.print(widget.content)
    return set(console.export_text().split())


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_help_shows_every_command_and_its_meaning_whole(tmp_path, tiny, size):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        await send(pilot, "/help")
        assert isinstance(app.screen, HelpScreen)
        words: set[str] = set()
        for widget in app.screen.query("#help-body Static"):
            words |= shown_words(widget)
        for command in app.registry.commands:
            assert command.help, command.name
            for word in f"{command.usage_line} {command.help}".split():
                assert word in words, (command.name, word)
        assert "…" not in " ".join(words)


async def test_help_groups_the_commands_by_topic(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        await pilot.press("f1")
        await pilot.pause()
        sections = dict(app.screen.sections)
        listed = [usage.split()[0] for rows in sections.values() for usage, _ in rows]
        assert sorted(listed) == sorted(f"/{c.name}" for c in app.registry.commands)
        assert "Other" not in sections  # every built-in command has its topic
        assert "/open [ID_OR_TITLE]" in dict(sections["Sessions"])  # without: the browser
