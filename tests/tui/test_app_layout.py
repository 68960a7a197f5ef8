"""What fits on screen: the header keeps the model name, the sessions browser
shows every column at 80x24."""

from __future__ import annotations

import pytest

from mlxchat.chat import SessionSummary, human_bytes, relative_time
from mlxchat.tui.screens import SessionsScreen
from mlxchat.units import fmt_int

from .app_support import ready, settle, tiny_app
from .tui_hosts import ScreenHost

NOW = 1_700_000_000.0
LONG_MODEL = "mlx-community/SmolLM2-135M-Instruct-8bit-dwq"


def screen_lines(app) -> list[str]:
    """The text on screen, row by row, as the terminal shows it."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


@pytest.fixture(scope="module")
def long_named(tmp_path_factory):
    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model

    return load_folder(write_tiny_model(tmp_path_factory.mktemp("long")), name=LONG_MODEL,
                       spec="tiny")


async def test_header_keeps_the_model_name_beside_a_long_title(tmp_path, long_named):
    app = tiny_app(tmp_path / "s.db", long_named)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        app.prompt.text = "What is the capital of Portugal and why is it such a nice city to visit?"
        await pilot.press("enter")
        await settle(pilot)
        header = screen_lines(app)[0]
        assert LONG_MODEL in header, header
        assert "What is the capital" in header, header


async def test_sessions_browser_shows_every_column_at_80x24():
    rows = [SessionSummary(1, "How do I read a very large CSV file in chunks with pandas?",
                           LONG_MODEL, NOW - 9000, NOW - 300, 12, 52_000_000),
            SessionSummary(2, "Sourdough", "qwen3-4b", NOW - 90000, NOW - 7200, 1234, 3_000_000)]
    app = ScreenHost(lambda: SessionsScreen(search=lambda text: rows, now=lambda: NOW))
    async with app.run_test(size=(80, 24)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        lines = screen_lines(app)
        heading = next(line for line in lines if "Title" in line)
        for label in ("Model", "Msgs", "Cache", "Last used"):
            assert label in heading, heading
        first = next(line for line in lines if "How do I read" in line)
        second = next(line for line in lines if "Sourdough" in line)
        for line, row in ((first, rows[0]), (second, rows[1])):
            for cell in (fmt_int(row.message_count), human_bytes(row.snapshot_bytes or 0),
                         relative_time(row.updated, NOW)):
                assert cell in line, (cell, line)
        assert "SmolLM2" in first and "qwen3-4b" in second


async def test_at_80x24_the_header_keeps_title_and_model_and_no_figure_is_cut(
        tmp_path, long_named):
    from mlxchat.tui.formatting import cache_source_label
    from mlxchat.units import fmt_seconds, fmt_tps

    app = tiny_app(tmp_path / "s.db", long_named)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        app.prompt.text = "Why is the sky blue?"
        await pilot.press("enter")
        await settle(pilot)
        lines = screen_lines(app)
        assert "Why is the sky" in lines[0] and LONG_MODEL in lines[0], lines[0]
        stats = app.conversation.turns.last_stats
        context, turn = lines[1].strip(), lines[2].strip()
        assert "…" not in context and "…" not in turn, (context, turn)
        assert turn.split(" · ")[:3] == [cache_source_label(stats.cache_source),
                                         f"ttft {fmt_seconds(stats.ttft_s)}",
                                         f"decode {fmt_tps(stats.decode_tps)}"], turn
        assert f"{fmt_int(stats.context_used)}/{fmt_int(stats.context_window)}" in context


def _heavy_figures(app) -> None:
    """The issue's 120x40 panel: Weights listing float32 copies and the
    precision, a last turn with a cache miss, then a prefill running."""
    from dataclasses import replace

    from mlxchat.engine.events import PrefillProgress

    from .tui_hosts import GB, SAMPLE_STATE, SAMPLE_STATS

    state = replace(SAMPLE_STATE, weights_bytes=115_200_000, kept_copies_bytes=538_000_000,
                    compute_dtype="float32", quantization="int4 g32 + int8 g32")
    app.gauges.update_state(state, 48 * GB)
    app.gauges.update_stats(SAMPLE_STATS)
    app.gauges.prefill(PrefillProgress(done=768, total=2048, tps=1500.25))


@pytest.mark.parametrize("size", [(120, 40), (100, 30)])
async def test_the_now_gauge_stays_on_screen_beside_every_other_figure(tmp_path, tiny, size):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=size) as pilot:
        await ready(pilot)
        _heavy_figures(app)
        await pilot.pause()
        live = app.gauges.query_one("#gauge-live")
        footer_row = size[1] - 1
        assert live.region.height and live.region.bottom <= footer_row, live.region
        assert any("prefill 768 / 2,048 tokens" in line for line in screen_lines(app))
        if size == (120, 40):  # and nothing needs scrolling to be seen there
            figures = app.gauges.query_one("#gauges-figures")
            assert figures.max_scroll_y == 0
            text = "\n".join(screen_lines(app))
            for shown in ("538.0 MB float32 copies", "peak memory", "miss: system prompt"):
                assert shown in text, shown


async def test_at_80x24_the_compact_bar_shows_the_prefill(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        _heavy_figures(app)
        await pilot.pause()
        assert "prefill 768 / 2,048 tokens" in screen_lines(app)[2]
