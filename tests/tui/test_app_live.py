"""The gauges move while a reply is generated, from the engine's own events."""

from __future__ import annotations

import re

from textual.widgets import Static

from mlxchat.tui import turn_stream
from mlxchat.tui.streaming import Pacer

from .app_support import ready, settle, tiny_app, tiny_settings


def gauge(app, selector: str) -> str:
    return app.gauges.query_one(selector, Static).render().plain


def context_used(app) -> int:
    return int(re.match(r"([\d,]+) /", gauge(app, "#context-text")).group(1).replace(",", ""))


async def test_context_and_kv_gauges_move_during_a_reply(tmp_path, tiny, monkeypatch):
    # Every token reaches the screen and refreshes the live figures (in use,
    # text batches are paced by what drawing costs and the figures move once
    # a second): what the gauges show is then a matter of tokens, not of how
    # fast this machine decodes them.
    monkeypatch.setattr(turn_stream, "LIVE_GAUGE_SECONDS", 0.0)
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings(max_tokens=24))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        app.turn_stream._pacer = Pacer(floor=0.0, ceiling=0.0)
        seen: list[tuple[int, str]] = []
        live_cache = app.gauges.live_cache

        def record(cached_tokens: int, kv_bytes: int) -> None:
            live_cache(cached_tokens, kv_bytes)
            # The figures shown while the reply streams (not the prompt's prefill).
            if app.generating and gauge(app, "#live-text").startswith("decoding"):
                now = (context_used(app), gauge(app, "#kv-text").splitlines()[0])
                if not seen or seen[-1] != now:
                    seen.append(now)
        app.gauges.live_cache = record
        app.prompt.text = "Tell me everything"
        await pilot.press("enter")
        await settle(pilot)
        assert not app.generating
        stats = app.conversation.turns.last_stats
        assert stats.generated_tokens >= 4, stats  # a reply long enough to watch
        used = [n for n, _ in seen]
        assert used == sorted(used) and len(set(used)) >= 3, seen
        assert len({kv for _, kv in seen}) >= 3, seen
        # When the turn ends the gauge shows the engine's exact figure.
        assert context_used(app) == app.conversation.views.state().cached_tokens


async def test_prefill_progress_counts_what_is_prefilled_and_ends_at_its_total(tmp_path,
                                                                                 tiny):
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings(max_tokens=4))
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        shown = []
        prefill = app.gauges.prefill

        def record(progress):
            shown.append((progress.done, progress.total))
            prefill(progress)
        app.gauges.prefill = record
        app.prompt.text = "A question of some length, " * 20
        await pilot.press("enter")
        await settle(pilot)
        stats = app.conversation.turns.last_stats
        assert shown, "no prefill progress was shown"
        assert {total for _, total in shown} == {stats.prefilled_tokens}
        assert shown[-1] == (stats.prefilled_tokens, stats.prefilled_tokens)
        assert [done for done, _ in shown] == sorted(done for done, _ in shown)


async def test_the_hidden_activity_bar_does_not_animate(tmp_path, tiny):
    """An indeterminate bar redraws 15 times a second: hidden, it must not
    (it woke the UI thread through every reply and every idle minute)."""
    from textual.widgets._progress_bar import Bar

    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)  # loading the model showed it, indeterminate
        bar = app.activity.query_one(Bar)
        assert not app.activity.active and bar.auto_refresh is None
        app.activity.show("running /something…")
        await pilot.pause()
        assert app.activity.active and bar.auto_refresh is not None
        app.activity.hide()
        await pilot.pause()
        assert bar.auto_refresh is None
