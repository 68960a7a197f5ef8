"""Cancellation, context overflow and KV cache quantization."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import ContextOverflowError, PrefillProgress, TextDelta, TurnDone
from mlxchat.generation import GenerationSettings

from .conftest import GREEDY, run
from tests.old_snapshots import write_old_snapshot


def test_cancel_mid_decode_keeps_partial_reply_and_consistent_cache(engine):
    msgs = [Message("user", "Write a long essay.")]
    long = GenerationSettings(temperature=0.0, max_tokens=400)
    events = engine.turn(msgs, long)
    deltas = []
    done = None
    for ev in events:
        if isinstance(ev, TextDelta):
            deltas.append(ev.text)
            if len(deltas) == 3:
                engine.cancel()
        elif isinstance(ev, TurnDone):
            done = ev
    assert done.stats.finish_reason == "cancelled"
    assert done.reply == "".join(deltas)
    assert 3 <= done.stats.generated_tokens <= 5  # stops within about one token
    assert engine.state().cached_tokens == done.stats.context_used
    assert len(engine.cached_tokens) == done.stats.context_used
    # The partial reply continues the conversation with full reuse.
    nxt = run(engine, msgs + [Message("assistant", done.reply), Message("user", "Go on.")])
    assert nxt.stats.reused_tokens == done.stats.context_used
    assert nxt.stats.miss_reason is None


def test_cancel_mid_prefill_keeps_the_chunks_done(tiny):
    engine = ChatEngine(tiny, chunk_seconds=0.0)  # smallest chunks: 16 tokens
    try:
        msgs = [Message("user", "word " * 300)]
        done = None
        seen = []
        for ev in engine.turn(msgs, GREEDY):
            if isinstance(ev, PrefillProgress):
                seen.append(ev)
                if ev.done > 0:
                    engine.cancel()
            if isinstance(ev, TurnDone):
                done = ev
        assert done.stats.finish_reason == "cancelled"
        assert done.reply == "" and done.stats.generated_tokens == 0
        held = done.stats.context_used
        assert 0 < held < done.stats.prompt_tokens
        # The engine checks the cancel at every chunk: it stops within one chunk
        # of the last progress it reported (how many chunks ran between the
        # event and the consumer's cancel is the scheduler's business: with the
        # suite on both cores the consumer thread can wait several chunks).
        assert held <= seen[-1].done + 16
        assert engine.state().cached_tokens == held
        again = run(engine, msgs)
        assert again.stats.reused_tokens == held and again.stats.miss_reason is None
    finally:
        engine.close()


def test_closing_the_event_iterator_cancels(engine):
    it = engine.turn([Message("user", "Talk.")], GenerationSettings(temperature=0, max_tokens=500))
    for ev in it:
        if isinstance(ev, TextDelta):
            break
    it.close()
    # The engine is free again and consistent.
    done = run(engine, [Message("user", "Talk.")])
    assert done.stats.finish_reason == "length"


def _long_history(turns: int) -> list[Message]:
    msgs = [Message("system", "Sys.")]
    for i in range(turns):
        msgs += [Message("user", f"user message {i} " + "x" * 40),
                 Message("assistant", f"reply {i} " + "y" * 40)]
    return msgs + [Message("user", "the newest question")]


def test_drop_oldest_keeps_system_and_newest(tiny_small_window):
    engine = ChatEngine(tiny_small_window)
    try:
        msgs = _long_history(6)
        done = run(engine, msgs, GenerationSettings(temperature=0, max_tokens=20))
        assert done.dropped_messages > 0 and done.dropped_messages % 2 == 0
        assert done.stats.dropped_messages == done.dropped_messages
        assert done.stats.prompt_tokens + 20 <= 256
        kept = [msgs[0]] + msgs[1 + done.dropped_messages:]
        assert done.stats.prompt_tokens == engine.prompts.count_tokens(kept)
        # A follow-up that overflows again explains the cache miss.
        more = kept + [Message("assistant", done.reply), Message("user", "z" * 60)]
        nxt = run(engine, [msgs[0]] + msgs[1:] + more[len(kept):],
                  GenerationSettings(temperature=0, max_tokens=20))
        assert nxt.stats.miss_reason.startswith("context overflow: dropped")
    finally:
        engine.close()


def test_a_reply_the_window_stops_fills_it_to_the_last_token_and_says_so(tiny_small_window):
    engine = ChatEngine(tiny_small_window)
    window = tiny_small_window.info.context_window
    try:
        # A prompt near the window and a max_tokens well past what is left:
        # the window, not max_tokens, ends the reply.
        settings = GenerationSettings(temperature=0, max_tokens=window)
        text = "q"
        while engine.prompts.count_tokens([Message("user", text + "q")]) <= window - 30:
            text += "q"
        done = run(engine, [Message("user", text)], settings)
        stats = done.stats
        assert stats.finish_reason == "length" and stats.generated_tokens < window
        assert stats.prompt_tokens + stats.generated_tokens == window
        assert stats.context_used == window and engine.state().cached_tokens == window
        assert stats.window_full
        # max_tokens ending a reply is not the window's doing.
        short = run(engine, [Message("user", "short")], GREEDY).stats
        assert short.finish_reason == "length" and not short.window_full
    finally:
        engine.close()


def test_stop_policy_refuses_with_sizes(tiny_small_window):
    engine = ChatEngine(tiny_small_window)
    try:
        stop = GenerationSettings(max_tokens=20, context_policy="stop")
        with pytest.raises(ContextOverflowError, match="context window is 256"):
            list(engine.turn(_long_history(6), stop))
        assert engine.state().cached_tokens == 0  # nothing changed
    finally:
        engine.close()


def test_message_larger_than_window_is_refused(tiny_small_window):
    engine = ChatEngine(tiny_small_window)
    try:
        with pytest.raises(ContextOverflowError) as err:
            list(engine.turn([Message("user", "q" * 400)], GREEDY))
        assert "400 tokens" in str(err.value) or "tokens" in str(err.value)
        assert "256" in str(err.value)
        # The engine still works afterwards.
        assert run(engine, [Message("user", "short")]).stats.generated_tokens > 0
    finally:
        engine.close()


@pytest.mark.parametrize("bits,limit", [(8, 0.35), (4, 0.2)])
def test_quantized_kv_cache_saves_bytes_and_survives_snapshots(tiny64, tmp_path, bits, limit):
    msgs = [Message("user", "A question with some words in it. " * 6)]
    plain, quant = ChatEngine(tiny64), ChatEngine(tiny64)
    try:
        a = run(plain, msgs)
        b = run(quant, msgs, GenerationSettings(temperature=0, max_tokens=12, kv_bits=bits))
        assert a.stats.context_used == b.stats.context_used
        assert b.stats.kv_bits == bits and quant.state().kv_bits == bits
        assert b.stats.kv_bytes / a.stats.kv_bytes <= limit
        info = write_old_snapshot(quant, tmp_path / "q.safetensors")
        assert info.kv_bits == bits
        fresh = ChatEngine(tiny64)
        assert fresh.load_snapshot(info.path, expected_checksum=info.checksum,
                                   conversation=msgs).ok
        assert fresh.state().kv_bits == bits and fresh.state().kv_dtype == f"{bits}-bit"
        assert fresh.state().cache_source == "snapshot"
        follow = msgs + [Message("assistant", b.reply), Message("user", "More?")]
        c = run(fresh, follow, GenerationSettings(temperature=0, max_tokens=12, kv_bits=bits))
        assert c.stats.cache_source == "snapshot" and c.stats.reused_tokens == b.stats.context_used
        fresh.close()
        # Turning quantization off cannot reuse a quantized cache.
        d = run(quant, follow)
        assert d.stats.miss_reason == "KV bit width changed" and d.stats.kv_bits is None
    finally:
        plain.close()
        quant.close()


def test_kv_bits_on_a_head_size_mlx_cannot_quantize_is_one_line(engine):
    from mlxchat.engine.events import EngineError

    assert engine.info.head_dim % 32  # the tiny model's head is 16 wide
    with pytest.raises(EngineError) as err:
        run(engine, [Message("user", "Hi")], GenerationSettings(temperature=0, max_tokens=2,
                                                               kv_bits=4))
    assert str(err.value) == ("kv_bits 4 needs a head size that is a multiple of 32; this "
                              "model's is 16, so its KV cache cannot be quantized (set kv_bits "
                              "to none)")
    # Nothing was left half-done: the next turn at full precision answers.
    assert run(engine, [Message("user", "Hi")], GREEDY).reply


def test_a_quantized_cache_is_saved_short_of_its_end_and_restores_there(tiny64, tmp_path):
    """A turn's prompt part is saved apart from its reply (``end`` short of
    the cache's): a quantized layer keeps every position, so it is cut there
    like a plain one, and a fresh engine restores exactly that prefix."""
    from mlxchat.engine.disk.segments import SegmentRef

    settings = GenerationSettings(temperature=0, max_tokens=8, kv_bits=4)
    msgs = [Message("user", "A question with some words in it. " * 4)]
    engine, fresh = ChatEngine(tiny64), ChatEngine(tiny64)
    try:
        done = run(engine, msgs, settings)
        tokens = list(engine.cached_tokens)
        end = len(tokens) - len(done.token_ids)
        info = engine.save_segment(tmp_path / "prompt.safetensors", 0, end)
        assert (info.end, info.kv_bits) == (end, 4)
        ref = SegmentRef(Path(info.path), 0, end, info.checksum, tokens[:end])
        assert fresh.load_segments([ref]).ok
        assert fresh.cached_tokens == tokens[:end] and fresh.state().kv_bits == 4
        again = run(fresh, msgs, settings)
        assert again.stats.reused_tokens == end - 1 and again.reply == done.reply
    finally:
        engine.close()
        fresh.close()
