from dataclasses import replace

from mlxchat.engine.events import PrefillProgress
from mlxchat.tui.formatting import (
    cache_source_label,
    fmt_bits_per_weight,
    fmt_bytes,
    fmt_int,
    fmt_percent,
    fmt_seconds,
    fmt_tps,
    kv_room,
)
from mlxchat.tui.widgets import GaugesPanel, Meter
from textual.widgets import Static

from .tui_hosts import GB, SAMPLE_STATE, SAMPLE_STATS, HostApp


def text(panel: GaugesPanel, selector: str) -> str:
    return panel.query_one(selector, Static).render().plain


def host() -> HostApp:
    return HostApp(GaugesPanel)


async def test_shows_exactly_the_given_figures():
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        panel.update_state(SAMPLE_STATE, 48 * GB)
        panel.update_stats(SAMPLE_STATS)
        s, st = SAMPLE_STATE, SAMPLE_STATS
        assert text(panel, "#gauge-model") == "smollm2-135m"
        assert text(panel, "#context-text") == (
            f"{fmt_int(s.cached_tokens)} / {fmt_int(s.context_window)} tokens  "
            f"{fmt_percent(s.cached_tokens, s.context_window)}\nheld in the KV cache")
        room = kv_room(kv_bytes=s.kv_bytes, cached_tokens=s.cached_tokens,
                       budget_bytes=48 * GB, context_window=s.context_window)
        kv = text(panel, "#kv-text").splitlines()
        assert kv[0] == f"{fmt_bytes(s.kv_bytes)} · {fmt_percent(s.kv_bytes, 48 * GB)} of 48.0 GB budget"
        assert kv[1] == f"room {fmt_int(room.tokens)} tokens (window limit)"
        assert kv[2] == f"memory would fit {fmt_int(room.by_memory)}"
        assert panel.query_one("#gauge-kv").border_title == "KV cache · native"
        assert text(panel, "#kv-source") == f"from snapshot · {fmt_int(s.cached_tokens)} tokens"
        assert text(panel, "#weights-text") == (
            f"{fmt_bytes(s.weights_bytes)} in memory\n"
            f"{fmt_bits_per_weight(s.bits_per_weight, s.scales_dtype)}\n"
            f"peak memory {fmt_bytes(s.peak_memory_bytes)}")
        assert text(panel, "#turn-text").splitlines() == [
            cache_source_label("snapshot"),
            f"first token  {fmt_seconds(st.ttft_s)}",
            f"prefill      {fmt_tps(st.prefill_tps)}",
            f"decode       {fmt_tps(st.decode_tps)}",
            f"reused {fmt_int(st.reused_tokens)} · prefilled {fmt_int(st.prefilled_tokens)}",
            "miss: system prompt changed",
        ]
        # and the literal strings, so a formatting change is a visible decision
        assert "first token  123 ms" in text(panel, "#turn-text")
        assert "decode       35.2 tok/s" in text(panel, "#turn-text")
        assert kv[0] == "24.2 MB · 0% of 48.0 GB budget"
        assert "4.52 bits/weight (float32 scales)" in text(panel, "#weights-text")


async def test_kv_bits_and_memory_bound_room():
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        # 1000 bytes/token, 5000 bytes of budget left -> 5 tokens, below the window's 7008
        state = replace(SAMPLE_STATE, kv_bits=4, kv_bytes=1_184_000)
        panel.update_state(state, 1_189_000)
        assert panel.query_one("#gauge-kv").border_title == "KV cache · 4-bit"
        kv = text(panel, "#kv-text").splitlines()
        assert kv[1] == "room 5 tokens (memory limit)"
        assert kv[2] == f"window has {fmt_int(8192 - 1184)} left"
        assert panel.query_one("#kv-meter", Meter).level == "error"


async def test_context_colour_changes_at_80_and_95_percent():
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        meters = [panel.query_one("#context-meter", Meter),
                  panel.query_one("#compact-context-meter", Meter)]
        for used, level in [(799, "ok"), (800, "warning"), (949, "warning"), (950, "error")]:
            panel.update_state(replace(SAMPLE_STATE, cached_tokens=used, context_window=1000), GB)
            for meter in meters:
                assert meter.level == level
                assert meter.has_class("-warning") == (level == "warning")
                assert meter.has_class("-error") == (level == "error")
            assert meters[0].fraction == used / 1000


async def test_live_prefill_then_decode_then_idle():
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        panel.prefill(PrefillProgress(done=512, total=2048, tps=1500.25))
        live_meter = panel.query_one("#live-meter", Meter)
        assert live_meter.display and live_meter.fraction == 0.25
        assert text(panel, "#live-text") == "prefill 512 / 2,048 tokens\n1,500.2 tok/s"
        assert text(panel, "#compact-live") == "prefill 512 / 2,048 tokens · 1,500.2 tok/s"
        panel.decoding(42, 31.5)
        assert not live_meter.display
        assert text(panel, "#live-text") == "decoding 42 tokens\n31.5 tok/s"
        panel.update_stats(SAMPLE_STATS)
        assert text(panel, "#compact-live").startswith("decoding")  # live wins while busy
        panel.idle()
        assert text(panel, "#live-text") == "idle"
        assert text(panel, "#compact-live").startswith("from snapshot · ttft 123 ms")


async def test_sidebar_when_wide_compact_bar_at_80x24():
    app = host()
    async with app.run_test(size=(200, 50)) as pilot:
        panel = app.query_one(GaugesPanel)
        panel.update_state(SAMPLE_STATE, 48 * GB)
        await pilot.pause()
        assert panel.query_one("#gauges-full").display
        assert not panel.query_one("#gauges-compact").display
        assert panel.region.x > 150 and panel.region.height == 50

        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert app.screen.has_class("-narrow")
        assert not panel.query_one("#gauges-full").display
        assert panel.query_one("#gauges-compact").display
        assert panel.region.y == 0 and panel.region.width == 80
        assert panel.region.height <= 3  # two lines and a rule


async def test_figures_given_before_mount_are_shown_on_mount():
    panel = GaugesPanel()
    panel.update_state(SAMPLE_STATE, 48 * GB)
    panel.update_stats(SAMPLE_STATS)
    app = HostApp(lambda: panel)
    async with app.run_test(size=(200, 50)):
        assert text(panel, "#gauge-model") == "smollm2-135m"
        assert text(panel, "#turn-text").startswith("from snapshot")


async def test_resumed_cache_shows_its_source_before_any_turn():
    app = host()
    async with app.run_test(size=(80, 24)):
        panel = app.query_one(GaugesPanel)
        panel.update_state(replace(SAMPLE_STATE, last_stats=None), 48 * GB)
        assert text(panel, "#kv-source") == "from snapshot · 1,184 tokens"
        assert text(panel, "#compact-live") == "from snapshot · 1,184 tokens"
        assert text(panel, "#turn-text") == "no turn yet"
        panel.update_stats(SAMPLE_STATS)
        panel.update_stats(None)  # another session, without a turn yet
        assert text(panel, "#turn-text") == "no turn yet"
        assert text(panel, "#compact-live") == "from snapshot · 1,184 tokens"
        panel.update_state(replace(SAMPLE_STATE, cached_tokens=0, kv_bytes=0,
                                   cache_source="cold"), 48 * GB)
        assert text(panel, "#kv-source") == "empty"
        assert text(panel, "#compact-live") == "idle"
