"""Pinned documents in the app: ``mlxchat --pin``, the context gauge's own
colour for the pinned part, and pinning from the sessions browser."""

from __future__ import annotations

from textual.widgets import Static

from mlxchat.tui.widgets import Meter

from .app_support import ready, send, settle, tiny_app

DOC = "The ferry leaves at seven and returns at noon.\n" * 6


async def test_pin_on_start_shows_the_pinned_part_in_the_context_gauge(tmp_path, tiny):
    doc = tmp_path / "ferry.txt"
    doc.write_text(DOC)
    app = tiny_app(tmp_path / "s.db", tiny, pins=[str(doc)])
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await settle(pilot)
        conv = app.conversation
        assert [p.name for p in conv.session.pins] == ["ferry.txt"]
        await send(pilot, "When does it leave?")
        pinned = conv.views.state().pinned_tokens
        assert pinned == len(conv.pins.prefix_tokens()) > 0
        text = app.gauges.query_one("#context-text", Static).render().plain
        assert f"pinned {pinned:,}" in text
        meter = app.gauges.query_one("#context-meter", Meter)
        assert 0 < meter.pinned < meter.fraction
        strip = meter.render_line(0)
        colours = {seg.style.color for seg in strip if seg.text.strip()}
        assert len(colours) == 2  # the pinned part and the rest, each its own colour
        await send(pilot, "/unpin all")
        await send(pilot, "And back?")
        assert app.gauges.query_one("#context-meter", Meter).pinned == 0
        assert "pinned" not in app.gauges.query_one("#context-text", Static).render().plain


async def test_a_missing_file_on_start_is_one_error_line(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny, pins=[str(tmp_path / "gone.txt")])
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await settle(pilot)
        notices = [w for w in app.transcript.children if getattr(w, "level", "") == "error"]
        assert len(notices) == 1 and "No such file" in notices[0].render().plain
        assert app.conversation.session.pins == []


async def test_pin_from_the_sessions_browser(tmp_path, tiny):
    doc = tmp_path / "ferry.txt"
    doc.write_text(DOC)
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        await send(pilot, "About boats")
        first = app.conversation.session.id
        await send(pilot, "/new")
        await send(pilot, "About trains")
        await pilot.press("ctrl+o")
        await settle(pilot)
        await pilot.press("down", "down", "p")  # the older session: "About boats"
        app.screen.query_one("#sessions-rename").value = str(doc)
        await pilot.press("enter")
        await settle(pilot)
        conv = app.conversation
        assert conv.session.id == first and [p.name for p in conv.session.pins] == ["ferry.txt"]
        await pilot.press("ctrl+o")
        await settle(pilot)
        by_title = {s.title: s.pins for s in app.screen.results}
        assert by_title == {"About boats": 1, "About trains": 0}
