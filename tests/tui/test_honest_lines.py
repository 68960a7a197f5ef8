"""The line under a reply and the Last turn gauge show measurements only
(issue 47): no ttft without a token, a new conversation is no "miss"."""

from __future__ import annotations

from mlxchat.tui.formatting import cache_source_label, transcript_stats_line
from mlxchat.turn_stats import NEW_CONVERSATION, TurnStats


def test_no_ttft_without_a_token_and_no_miss_for_a_new_conversation():
    stopped = TurnStats(finish_reason="cancelled", prompt_tokens=300, prefilled_tokens=64)
    assert "ttft" not in transcript_stats_line(stopped)
    answered = TurnStats(ttft_s=0.25, generated_tokens=3, decode_tps=40.0)
    assert transcript_stats_line(answered).startswith("ttft 250 ms · 40.0 tok/s")
    fresh = TurnStats(ttft_s=0.2, generated_tokens=2, reused_tokens=12,
                      miss_reason=NEW_CONVERSATION, cache_source="warm")
    line = transcript_stats_line(fresh)
    assert NEW_CONVERSATION in line and "miss" not in line
    edited = TurnStats(ttft_s=0.2, generated_tokens=2, miss_reason="system prompt changed")
    assert "miss: system prompt changed" in transcript_stats_line(edited)
    assert cache_source_label("typed") == "prefilled while typing"
