import time

from mlxchat.chat import relative_time
from mlxchat.store.export import markdown_stats_line
from mlxchat.tui.formatting import (
    fmt_bits_per_weight,
    fmt_precision,
    kv_bits_label,
    kv_room,
    transcript_stats_line,
    usage_level,
)
from mlxchat.turn_stats import TurnStats
from mlxchat.units import fmt_gauge_percent


def test_bits_per_weight():
    assert fmt_bits_per_weight(4.5) == "4.50 bits/weight"


def test_precision_line_names_the_format_and_the_compute_dtype():
    assert fmt_precision("int4 (g32)", "float32") == "int4 g32 · computes in float32"
    assert fmt_precision("int4 (g32) + int8 (g32)", "bfloat16") == \
        "int4 g32 + int8 g32 · computes in bfloat16"
    assert fmt_precision("float32", "float32") == "computes in float32"


def test_percent_rounds_down_and_levels_switch_at_80_and_95():
    assert fmt_gauge_percent(799, 1000) == "79%"
    assert fmt_gauge_percent(1, 0) == "–"
    assert usage_level(799, 1000) == "ok"
    assert usage_level(800, 1000) == "warning"
    assert usage_level(949, 1000) == "warning"
    assert usage_level(950, 1000) == "error"
    assert usage_level(5, 0) == "ok"


def test_kv_bits_label():
    assert kv_bits_label(8) == "8-bit"
    assert kv_bits_label(4) == "4-bit"
    assert kv_bits_label(None, "float16") == "fp16"
    assert kv_bits_label(None, "mlx.core.float32") == "fp32"
    assert kv_bits_label(None) == "—"  # no model: nothing to name
    assert kv_bits_label(None, "-") == "—"


def test_kv_room_is_the_budget_formula_capped_by_the_window():
    # 1000 tokens in 1 MB -> 1000 bytes/token; 9 MB left -> 9000 tokens by memory.
    room = kv_room(kv_bytes=1_000_000, cached_tokens=1000, budget_bytes=10_000_000,
                   context_window=4096)
    assert (room.by_memory, room.by_window, room.limit, room.tokens) == (9000, 3096, "window", 3096)
    tight = kv_room(kv_bytes=1_000_000, cached_tokens=1000, budget_bytes=2_000_000,
                    context_window=100_000)
    assert (tight.by_memory, tight.limit, tight.tokens) == (1000, "memory", 1000)
    empty = kv_room(kv_bytes=0, cached_tokens=0, budget_bytes=1, context_window=2048)
    assert (empty.by_memory, empty.tokens) == (None, 2048)


def test_transcript_stats_line():
    stats = TurnStats(ttft_s=0.25, decode_tps=40.0, generated_tokens=12, reused_tokens=100,
                      prefilled_tokens=5, cache_source="warm")
    assert transcript_stats_line(stats) == (
        "ttft 250 ms · 40.0 tok/s · 12 tokens · reused 100 / prefilled 5 · warm cache · "
        "ended by the model")
    stats.miss_reason = "edited message"
    assert transcript_stats_line(stats).endswith("· miss: edited message")
    stats.spec_mode, stats.draft_tokens_proposed, stats.draft_tokens_accepted = "draft", 9, 6
    stats.target_passes = 6
    line = transcript_stats_line(stats)
    assert "· warm cache · draft 67% accepted · 2.00 tok/pass · ended by the model · miss" in line
    stats.draft_rebuilt, stats.draft_prefilled_tokens = True, 1200
    assert "· draft cache rebuilt (1,200 tokens) ·" in transcript_stats_line(stats)


def _turn(engine, messages, settings):
    from mlxchat.engine.events import TurnDone

    return next(e for e in engine.turn(messages, settings) if isinstance(e, TurnDone)).stats


def test_the_footer_says_a_drop_once_and_when_the_window_ended_the_reply(tiny):
    from mlxchat.chat import Message
    from mlxchat.engine.core import ChatEngine
    from mlxchat.generation import GenerationSettings

    window = 256
    engine = ChatEngine(tiny)
    try:
        settings = GenerationSettings(temperature=0, max_tokens=20, context_window=window)
        history = [Message("system", "Sys.")]
        for i in range(6):
            history += [Message("user", f"user message {i} " + "x" * 40),
                        Message("assistant", f"reply {i} " + "y" * 40)]
        _turn(engine, history[:3], settings)  # a cache the next turn cannot extend
        dropped = _turn(engine, [*history, Message("user", "the newest")], settings)
        assert dropped.dropped_messages and dropped.miss_reason  # the miss is the drop
        footer = transcript_stats_line(dropped)
        assert footer.count("oldest messages") == 1
        assert f"· {dropped.dropped_messages} oldest messages left out" in footer
        assert footer.endswith(" · stopped by max_tokens · "
                               f"{dropped.dropped_messages} oldest messages left out")
        text = "q"
        while engine.prompts.count_tokens([Message("user", text + "q")]) <= window - 30:
            text += "q"
        full = _turn(engine, [Message("user", text)], GenerationSettings(
            temperature=0, max_tokens=window, context_window=window))
        assert full.finish_reason == "length" and full.context_used == window
        assert " · stopped by the context window (full)" in transcript_stats_line(full)
        assert markdown_stats_line(full, cancelled=False).endswith(" · window full_")
    finally:
        engine.close()


def test_one_token_is_not_tokens():
    stats = TurnStats(generated_tokens=1, finish_reason="cancelled")
    assert " · 1 token · " in transcript_stats_line(stats)
    assert " · 1 token · " in markdown_stats_line(stats, cancelled=True)
    stats.generated_tokens = 1_200
    assert " · 1,200 tokens · " in transcript_stats_line(stats)


def test_relative_time():
    now = 1_700_000_000.0
    assert relative_time(now - 5, now) == "just now"
    assert relative_time(now - 300, now) == "5 min ago"
    assert relative_time(now - 3 * 3600, now) == "3 h ago"
    assert relative_time(now - 30 * 3600, now) == "yesterday"
    assert relative_time(now - 4 * 86400, now) == "4 days ago"
    old = now - 40 * 86400
    assert relative_time(old, now) == time.strftime("%Y-%m-%d", time.localtime(old))
