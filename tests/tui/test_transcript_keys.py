"""The transcript scrolls from the keyboard while the input keeps the focus:
the page keys, ctrl+up/down, ctrl+home/end, and home/end while the input is
empty (in text, home and end still move the input's cursor)."""

from __future__ import annotations

from textual.widgets import Static

from .app_support import ready, tiny_app


async def _long_transcript(pilot):
    app = await ready(pilot)
    for i in range(60):
        await app.transcript.add_notice(f"line {i}")
    await pilot.pause()
    transcript = app.transcript
    assert transcript.max_scroll_y > transcript.size.height  # more than two pages
    assert transcript.scroll_y == transcript.max_scroll_y  # anchored at the bottom
    assert app.focused is app.prompt.area
    return app, transcript


async def test_page_keys_and_ctrl_arrows_scroll_the_transcript(tmp_path, tiny):
    async with tiny_app(tmp_path / "s.db", tiny).run_test(size=(80, 24)) as pilot:
        app, transcript = await _long_transcript(pilot)
        bottom = transcript.max_scroll_y
        await pilot.press("pageup")
        page = bottom - transcript.scroll_y
        assert page >= transcript.size.height - 2
        await pilot.press("shift+pageup")
        assert transcript.scroll_y == bottom - 2 * page
        await pilot.press("ctrl+down")
        assert transcript.scroll_y == bottom - 2 * page + 3
        await pilot.press("ctrl+up", "ctrl+up")
        assert transcript.scroll_y == bottom - 2 * page - 3
        await pilot.press("pagedown", "shift+pagedown", "pagedown")
        assert transcript.scroll_y == transcript.max_scroll_y
        assert app.focused is app.prompt.area  # the input kept the focus


async def test_home_and_end_scroll_while_the_input_is_empty(tmp_path, tiny):
    async with tiny_app(tmp_path / "s.db", tiny).run_test(size=(80, 24)) as pilot:
        app, transcript = await _long_transcript(pilot)
        await pilot.press("home")
        assert transcript.scroll_y == 0
        await transcript.mount(Static("text streamed in meanwhile"))
        await pilot.pause()
        assert transcript.scroll_y == 0  # the view stays where the user put it
        await pilot.press("end")
        assert transcript.scroll_y == transcript.max_scroll_y
        await transcript.mount(Static("more text"))
        await pilot.pause()
        assert transcript.scroll_y == transcript.max_scroll_y  # following again


async def test_home_and_end_move_the_cursor_in_text_and_ctrl_scrolls(tmp_path, tiny):
    async with tiny_app(tmp_path / "s.db", tiny).run_test(size=(80, 24)) as pilot:
        app, transcript = await _long_transcript(pilot)
        bottom = transcript.max_scroll_y
        app.prompt.text = "some text"
        await pilot.press("home")
        assert app.prompt.area.cursor_location == (0, 0) and transcript.scroll_y == bottom
        await pilot.press("end")
        assert app.prompt.area.cursor_location == (0, 9) and transcript.scroll_y == bottom
        await pilot.press("ctrl+home")
        assert transcript.scroll_y == 0 and app.prompt.text == "some text"
        await pilot.press("ctrl+end")
        assert transcript.scroll_y == transcript.max_scroll_y


async def test_a_dialog_keeps_its_own_page_keys(tmp_path, tiny):
    async with tiny_app(tmp_path / "s.db", tiny).run_test(size=(80, 24)) as pilot:
        app, transcript = await _long_transcript(pilot)
        await pilot.press("f1")
        await pilot.pause()
        assert len(app.screen_stack) == 2
        await pilot.press("pageup", "home")
        assert transcript.scroll_y == transcript.max_scroll_y
