"""Prefill while typing, in the app: the gauges count it as the user types,
a paste starts it at once, and the turn that follows reports it apart."""

from __future__ import annotations

import re

from textual import events
from textual.widgets import Static

from .app_support import ready, send, settle, tiny_app, until

WORDS = ["Tell", "me", "about", "the", "rivers", "and", "the", "harvests"]
SHOWN = re.compile(r"prefilled while typing: ([\d,]+) tokens")


def gauge(app, selector: str) -> str:
    return app.gauges.query_one(selector, Static).render().plain


def typed_count(app) -> int:
    m = SHOWN.search(gauge(app, "#live-text"))
    return int(m.group(1).replace(",", "")) if m else 0


async def first_turn(pilot) -> None:
    await ready(pilot)
    await send(pilot, "Hello there.")


async def test_typing_character_by_character_grows_the_prefilled_count(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_turn(pilot)
        counts = []
        for word in WORDS:
            for ch in word:
                await pilot.press(ch)
            await pilot.press("space")
            # Only finished words are prefilled: wait until this one is.
            await until(lambda: typed_count(app) > (counts[-1] if counts else 0))
            counts.append(typed_count(app))
        assert counts == sorted(counts) and len(set(counts)) == len(WORDS), counts
        # The Context gauge counts the typed-ahead tokens the cache holds too.
        held = app.conversation.views.state().cached_tokens
        assert gauge(app, "#context-text").startswith(f"{held:,} / ")
        await pilot.press("enter")
        await settle(pilot)
        stats = app.conversation.turns.last_stats
        assert stats.typed_prefill_tokens == counts[-1]
        assert f"typed ahead {counts[-1]:,}" in gauge(app, "#turn-text")
        assert "prefilled while typing" not in gauge(app, "#live-text")


async def test_a_paste_prefills_at_once(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(120, 40)) as pilot:
        await first_turn(pilot)
        app.typing.debounce_s = 3600  # only a paste can start it now
        app.prompt.area.post_message(events.Paste("A pasted block of text to answer. "))
        await until(lambda: typed_count(app) > 0)
        assert app.prompt.text.startswith("A pasted block")
        await pilot.press("x")  # typing waits for the pause: the count stays
        await pilot.pause()
        assert typed_count(app) == app.typing.tokens > 0
