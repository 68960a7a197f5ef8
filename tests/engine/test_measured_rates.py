"""Rates are measured or None, never a 0.0 that reads as a measurement: a reply of
one token has no decode interval, a turn that computed only the fed token has no
prefill, and the live events say None until something was timed."""

from __future__ import annotations

import json
from dataclasses import replace

from mlxchat.chat import Message
from mlxchat.engine.events import PrefillProgress, TextDelta, TurnDone
from mlxchat.engine.speculative.drafting import Drafting
from mlxchat.store.export import markdown_stats_line
from mlxchat.tui.formatting import transcript_stats_line
from mlxchat.turn_stats import TurnStats

from .conftest import GREEDY, run


def test_a_one_token_reply_has_no_decode_rate(engine):
    events = list(engine.turn([Message("user", "Hi there")], replace(GREEDY, max_tokens=1)))
    done = events[-1]
    assert isinstance(done, TurnDone)
    assert done.stats.generated_tokens == 1
    assert done.stats.decode_tps is None
    assert all(e.decode_tps is None for e in events if isinstance(e, TextDelta))
    # The prompt was prefilled cold: that rate was measured.
    assert done.stats.prefilled_tokens > 1 and done.stats.prefill_tps > 0


def test_live_rates_are_none_until_something_was_timed(engine):
    events = list(engine.turn([Message("user", "Tell me a long story, " * 20)],
                              replace(GREEDY, max_tokens=12)))
    prefill = [e for e in events if isinstance(e, PrefillProgress)]
    assert prefill[0].done == 0 and prefill[0].tps is None
    assert len(prefill) >= 2 and all(p.tps > 0 for p in prefill[1:])
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert any(d.generated_tokens > 1 for d in deltas)
    for d in deltas:  # the first token alone has no interval to time
        assert (d.decode_tps is None) == (d.generated_tokens == 1), d
        assert d.decode_tps is None or d.decode_tps > 0


def test_a_fully_warm_turn_reports_no_prefill_rate(engine):
    messages = [Message("user", "Tell me about pelicans.")]
    run(engine, messages)
    events = list(engine.turn(messages, GREEDY))  # the same prompt, all of it cached
    stats = events[-1].stats
    # Only the one token the first decode step feeds was computed: its time
    # is a decode step's, not a prefill rate.
    assert (stats.reused_tokens, stats.prefilled_tokens) == (stats.prompt_tokens - 1, 1)
    assert stats.prefill_tps is None
    assert [(p.done, p.total, p.tps) for p in events if isinstance(p, PrefillProgress)] == [
        (0, 1, None), (1, 1, None)]
    assert stats.generated_tokens > 1 and stats.decode_tps > 0


def test_rows_stored_with_zero_rates_read_as_not_measured():
    """Replies stored before the rates could be None hold 0.0 for 'not measured'."""
    old = TurnStats.from_dict(json.loads(
        '{"decode_tps": 0.0, "prefill_tps": 0.0, "generated_tokens": 1, "ttft_s": 0.2}'))
    assert (old.decode_tps, old.prefill_tps) == (None, None)
    stored = json.dumps(old.to_dict())
    assert '"decode_tps": null' in stored and TurnStats.from_dict(json.loads(stored)) == old
    kept = TurnStats.from_dict({"decode_tps": 35.5, "prefill_tps": 1200.0})
    assert (kept.decode_tps, kept.prefill_tps) == (35.5, 1200.0)
    assert "— tok/s" in markdown_stats_line(old) and "0.0" not in markdown_stats_line(old)
    assert "— tok/s" in transcript_stats_line(old)
    assert "35.5 tok/s" in markdown_stats_line(kept)


def test_auto_speculation_measures_nothing_against_an_unmeasured_rate(tiny):
    auto = replace(GREEDY, speculative="auto")
    drafting = Drafting(measure=lambda *a, **k: None)

    def reply(decode_tps):
        return TurnDone("x", TurnStats(generated_tokens=40, decode_tps=decode_tps,
                                       prompt_tokens=3), token_ids=[1] * 40)
    assert drafting.measurement(tiny, auto, reply(None), [1, 2, 3]) is None
    assert drafting.measurement(tiny, auto, reply(30.0), [1, 2, 3]) is not None
