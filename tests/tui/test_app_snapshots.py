"""Snapshots of the real app after a real turn on a tiny model. The engine's
clock-dependent figures are fixed (SteadyEngine); no cursor blink; fixed clock."""

from textual.widgets import Input

from .app_support import SteadyEngine, ready, send, settle, tiny_app


def steady_app(tmp_path, tiny):
    return tiny_app(tmp_path / "s.db", tiny, engine_factory=SteadyEngine)


async def after_a_turn(pilot) -> None:
    await ready(pilot)
    await send(pilot, "How do I read a file line by line?")


def test_main_screen_after_a_turn_wide(snap_compare, tmp_path, tiny):
    assert snap_compare(steady_app(tmp_path, tiny), terminal_size=(200, 50),
                        run_before=after_a_turn)


def test_main_screen_after_a_turn_narrow(snap_compare, tmp_path, tiny):
    assert snap_compare(steady_app(tmp_path, tiny), terminal_size=(80, 24),
                        run_before=after_a_turn)


def test_help_screen_from_f1(snap_compare, tmp_path, tiny):
    async def run_before(pilot):
        await ready(pilot)
        await pilot.press("f1")
        await pilot.pause()

    assert snap_compare(steady_app(tmp_path, tiny), terminal_size=(120, 40),
                        run_before=run_before)


def test_sessions_browser_from_ctrl_o(snap_compare, tmp_path, tiny):
    async def run_before(pilot):
        await ready(pilot)
        await send(pilot, "About apples")
        await send(pilot, "/new")
        await send(pilot, "About pears")
        await pilot.press("ctrl+o")
        await settle(pilot)
        pilot.app.screen.query_one("#sessions-search", Input).cursor_blink = False
        await pilot.pause()

    assert snap_compare(steady_app(tmp_path, tiny), terminal_size=(120, 40),
                        run_before=run_before)
