"""The gauges panel: figures the test works out itself, levels, live and compact views."""

from dataclasses import replace

from textual.widgets import Static

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import PrefillProgress, TextDelta, TurnDone
from mlxchat.generation import GenerationSettings
from mlxchat.tui.widgets import GaugesPanel, Meter

from .tui_hosts import GB, SAMPLE_STATE, SAMPLE_STATS, HostApp


def text(panel: GaugesPanel, selector: str) -> str:
    return panel.query_one(selector, Static).render().plain


def host() -> HostApp:
    return HostApp(GaugesPanel)


async def test_shows_exactly_the_given_figures():
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        budget = 48 * GB
        panel.update_state(SAMPLE_STATE, budget)
        panel.update_stats(SAMPLE_STATS)
        s = SAMPLE_STATE
        # The figures are worked out here from the sample numbers, not with the
        # widget's own helpers: a wrong formula there cannot agree with them.
        assert (s.cached_tokens, s.context_window, s.kv_bytes) == (1184, 8192, 24_248_320)
        per_token = s.kv_bytes // s.cached_tokens
        assert per_token * s.cached_tokens == s.kv_bytes  # 20,480 bytes a token, exactly
        memory_fits = (budget - s.kv_bytes) // per_token
        window_left = s.context_window - s.cached_tokens
        assert (memory_fits, window_left) == (2_342_566, 7008)
        assert text(panel, "#gauge-model") == "smollm2-135m"
        # 1184 / 8192 is 14.45%: the gauge floors it.
        assert text(panel, "#context-text") == "1,184 / 8,192 tokens  14%\nheld in the KV cache"
        kv = text(panel, "#kv-text").splitlines()
        assert kv == ["24.2 MB · 0% of 48.0 GB budget",  # 24 MB of 48 GB is 0.05%
                      "room 7,008 tokens (window limit)",
                      "memory would fit 2,342,566 tokens"]
        assert panel.query_one("#gauge-kv").border_title == "KV cache · fp16"
        assert text(panel, "#kv-source") == "from snapshot · 1,184 tokens"
        assert text(panel, "#weights-text") == (
            "77.5 MB in memory\n4.52 bits/weight (float32 scales)\npeak memory 120.3 MB")
        assert text(panel, "#turn-text").splitlines() == [
            "from snapshot",
            "first token  123 ms",  # 0.1234 s
            "prefill      1,234.6 tok/s",
            "decode       35.2 tok/s",
            "reused 1,024 · prefilled 32",
            "miss: system prompt changed",
        ]


async def test_weights_say_what_the_float32_copies_add():
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        # SmolLM2 on this CPU: 115.2 MB of weights, 538.0 MB of float32 copies.
        panel.update_state(replace(SAMPLE_STATE, weights_bytes=115_200_000,
                                   kept_copies_bytes=538_000_000), 48 * GB)
        assert text(panel, "#weights-text").splitlines()[:3] == [
            "653.2 MB in memory:", "  115.2 MB weights", "  538.0 MB float32 copies (CPU)"]


async def test_a_real_turn_shows_figures_counted_from_the_cache_and_the_tokenizer(tiny):
    messages = [Message("user", "Tell me about pelicans.")]
    engine = ChatEngine(tiny)
    try:
        done = [ev for ev in engine.turn(messages, GenerationSettings(temperature=0.0,
                                                                      max_tokens=12))
                if isinstance(ev, TurnDone)]
        assert len(done) == 1
        state = engine.state()
        cache = engine.live_view().cache()  # copies: the test counts the arrays itself
    finally:
        engine.close()
    # Counted here: tokens held from each layer's offset, bytes from the used
    # part of each key/value array, the prompt from the tokenizer's template.
    (tokens,) = {int(c.offset) for c in cache}
    kv_bytes = sum(c.keys[..., :tokens, :].nbytes + c.values[..., :tokens, :].nbytes
                   for c in cache)
    prompt = len(tiny.tokenizer.apply_chat_template(
        [{"role": "user", "content": messages[0].content}], add_generation_prompt=True))
    window = tiny.info.context_window
    dtype = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[
        str(cache[0].keys.dtype).removeprefix("mlx.core.")]
    budget = 10 * kv_bytes + 1  # just under 10%
    assert 1000 <= kv_bytes < 1_000_000 and 0 < tokens < window
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        panel.update_state(state, budget)
        context = text(panel, "#context-text")
        assert context == (f"{tokens:,} / {window:,} tokens  {100 * tokens // window}%\n"
                           "held in the KV cache")
        room = min(window - tokens, (budget - kv_bytes) * tokens // kv_bytes)
        kv = text(panel, "#kv-text").splitlines()
        assert kv[0] == f"{kv_bytes / 1000:.1f} KB · 9% of {budget / 1000:.1f} KB budget"
        assert kv[1].startswith(f"room {room:,} tokens (")
        assert panel.query_one("#gauge-kv").border_title == f"KV cache · {dtype}"
        turn = text(panel, "#turn-text")
        assert f"reused 0 · prefilled {prompt:,}" in turn


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
        assert kv[2] == "window has 7,008 tokens left"  # 8192 - 1184
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


async def test_live_rates_show_a_dash_until_measured():
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        panel.prefill(PrefillProgress(done=0, total=2048))  # a prefill's first event
        assert text(panel, "#live-text") == "prefill 0 / 2,048 tokens\n— tok/s"
        assert text(panel, "#compact-live") == "prefill 0 / 2,048 tokens · — tok/s"
        panel.decoding(1, None)  # the first token: no interval yet
        assert text(panel, "#live-text") == "decoding 1 token\n— tok/s"
        panel.update_stats(replace(SAMPLE_STATS, decode_tps=None, prefill_tps=None))
        panel.idle()
        turn = text(panel, "#turn-text").splitlines()
        assert turn[2:4] == ["prefill      — tok/s", "decode       — tok/s"]
        assert "decode — tok/s" in text(panel, "#compact-live")


async def test_sidebar_when_wide_compact_bar_at_80x24():
    app = host()
    async with app.run_test(size=(200, 50)) as pilot:
        panel = app.query_one(GaugesPanel)
        panel.update_state(SAMPLE_STATE, 48 * GB)
        await pilot.pause()
        assert panel.query_one("#gauges-full").display
        assert not panel.query_one("#gauges-compact").display
        # Between the header's row and the footer's: its last rows were under the footer.
        assert panel.region.x > 150 and (panel.region.y, panel.region.height) == (1, 48)

        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert app.screen.has_class("-narrow")
        assert not panel.query_one("#gauges-full").display
        assert panel.query_one("#gauges-compact").display
        assert panel.region.y == 1 and panel.region.width == 80  # under the header
        assert panel.region.height == 2  # two lines, no rule under them


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


async def test_a_reasoning_turn_shows_thinking_and_answer_tokens_apart():
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        panel.decoding(17, 20.0, "reasoning")
        assert text(panel, "#live-text") == "thinking 17 tokens\n20.0 tok/s"
        # 300 sampled, 210 of them reasoning: 90 answer tokens (the end token included).
        panel.update_stats(replace(SAMPLE_STATS, generated_tokens=300, reasoning_tokens=210))
        assert "thinking 210 · answer 90 tokens" in text(panel, "#turn-text").splitlines()
        panel.update_stats(SAMPLE_STATS)  # no reasoning: no such line
        assert not any(line.startswith("thinking") for line in
                       text(panel, "#turn-text").splitlines())


async def test_speculation_figures_while_decoding_and_after():
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        panel.update_state(replace(SAMPLE_STATE, draft_model="tiny-d", draft_kv_bytes=2_000_000),
                           GB)
        assert "+ draft tiny-d 2.0 MB" in text(panel, "#kv-text")
        live = TextDelta("x", 42, 31.5, acceptance=0.75, tokens_per_pass=2.5)
        panel.decoding(42, 31.5, speculation=live)
        assert text(panel, "#live-text") == ("decoding 42 tokens\n31.5 tok/s\n"
                                             "75% accepted · 2.50 tok/pass")
        plain = TextDelta("x", 42, 31.5)
        panel.decoding(42, 31.5, speculation=plain)
        assert text(panel, "#live-text") == "decoding 42 tokens\n31.5 tok/s"
        panel.update_stats(replace(SAMPLE_STATS, spec_mode="lookup", draft_tokens_proposed=40,
                                   draft_tokens_accepted=10, generated_tokens=30,
                                   target_passes=20))
        assert "lookup 25% accepted · 1.50 tok/pass" in text(panel, "#turn-text")


async def test_a_split_model_shows_each_ranks_own_figures():
    from mlxchat.engine.events import RankFigures

    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        state = replace(SAMPLE_STATE, layout="2 ranks · tensor · 38.8 MB each",
                        ranks=[RankFigures(0, 38_800_000, 12_124_160, 90_000_000),
                               RankFigures(1, 38_700_000, 12_124_160, 88_000_000)])
        panel.update_state(state, 48 * GB)
        assert text(panel, "#weights-text").splitlines()[:3] == [
            "2 ranks · tensor · 38.8 MB each",
            "rank 0: 38.8 MB · KV 12.1 MB · peak 90.0 MB",
            "rank 1: 38.7 MB · KV 12.1 MB · peak 88.0 MB"]


async def test_one_decoded_token_is_one_token():
    app = host()
    async with app.run_test(size=(200, 50)):
        panel = app.query_one(GaugesPanel)
        panel.decoding(1, None)
        assert text(panel, "#live-text").splitlines()[0] == "decoding 1 token"
        panel.decoding(2, None)
        assert text(panel, "#live-text").splitlines()[0] == "decoding 2 tokens"


async def test_a_live_figure_that_grows_a_digit_and_wraps_is_laid_out_again():
    from textual.app import App

    from mlxchat.tui.widgets.gauges import GaugeText

    class Narrow(App[None]):
        CSS = "GaugeText { width: 20; height: auto; }"

        def compose(self):
            yield GaugeText(id="t")

    app = Narrow()
    async with app.run_test(size=(40, 10)) as pilot:
        text = app.query_one(GaugeText)
        text.show("decoding 99 tokens")  # 18 cells: one row
        await pilot.pause()
        assert text.size.height == 1
        text.show("decoding 100 tokens")  # 19 cells: one row still
        text.show("decoding 1,000 tokens")  # 21 cells: wraps, the same "\n" count
        await pilot.pause()
        assert text.size.height == 2  # the second row is shown, not cut off
