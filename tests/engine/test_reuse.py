"""Prefix reuse: follow-ups prefill only their new tokens, and results never change."""

from __future__ import annotations

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine

from .conftest import GREEDY, run
from tests.old_snapshots import write_old_snapshot


def five_turns(make_engine, tmp_path, mode: str) -> tuple[list[str], list]:
    """Five greedy turns; ``mode`` is warm (one engine), snapshot (a fresh engine
    restored from the previous turn's file) or cold (a fresh engine each turn)."""
    msgs = [Message("system", "You are terse.")]
    replies, stats = [], []
    engine = make_engine()
    snap = None
    for i in range(5):
        msgs.append(Message("user", f"Turn {i}: what comes after {i * 11}?"))
        if mode != "warm":
            engine.close()
            engine = make_engine()
            if mode == "snapshot" and snap is not None:
                assert engine.load_snapshot(snap.path, expected_checksum=snap.checksum,
                                            conversation=msgs[:-1]).ok
        done = run(engine, msgs)
        replies.append(done.reply)
        stats.append(done.stats)
        msgs.append(Message("assistant", done.reply))
        if mode == "snapshot":
            snap = write_old_snapshot(engine, tmp_path / f"turn{i}.safetensors")
    engine.close()
    return replies, stats


def test_warm_snapshot_and_cold_give_identical_replies(tiny, tmp_path):
    make = lambda: ChatEngine(tiny)  # noqa: E731
    warm, warm_stats = five_turns(make, tmp_path, "warm")
    snap, snap_stats = five_turns(make, tmp_path, "snapshot")
    cold, cold_stats = five_turns(make, tmp_path, "cold")
    assert warm == snap == cold
    assert all(r for r in warm), "replies should not be empty"
    assert [s.cache_source for s in warm_stats] == ["cold"] + ["warm"] * 4
    assert [s.cache_source for s in snap_stats] == ["cold"] + ["snapshot"] * 4
    assert [s.cache_source for s in cold_stats] == ["cold"] * 5
    for w, c in zip(warm_stats[1:], cold_stats[1:]):
        # Warm reuses everything the previous turn left in the cache.
        assert w.reused_tokens > 0 and w.miss_reason is None
        assert w.reused_tokens + w.prefilled_tokens == c.prompt_tokens
        assert c.reused_tokens == 0 and c.prefilled_tokens == c.prompt_tokens
    for w, s in zip(warm_stats, snap_stats):
        assert (w.reused_tokens, w.prefilled_tokens) == (s.reused_tokens, s.prefilled_tokens)


def test_followup_prefills_only_new_tokens(engine):
    msgs = [Message("user", "Hello, how are you today?")]
    first = run(engine, msgs)
    cached = first.stats.context_used
    msgs += [Message("assistant", first.reply), Message("user", "Fine thanks.")]
    second = run(engine, msgs)
    assert second.stats.reused_tokens == cached
    assert second.stats.prefilled_tokens == second.stats.prompt_tokens - cached
    assert second.stats.miss_reason is None
    assert engine.state().cached_tokens == second.stats.context_used
    assert engine.cached_tokens[: second.stats.prompt_tokens] == \
        engine.loaded.tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in msgs], add_generation_prompt=True)


def test_edit_retry_system_change_and_model_switch_report_reasons(engine, tiny64):
    base = [Message("system", "Be kind."), Message("user", "First question here.")]
    a = run(engine, base)
    hist = base + [Message("assistant", a.reply), Message("user", "Second question.")]
    b = run(engine, hist)
    # Retry the last reply: same conversation without the reply.
    retry = run(engine, hist)
    assert retry.stats.miss_reason.startswith("reply retried")
    assert retry.reply == b.reply
    assert retry.stats.reused_tokens == retry.stats.prompt_tokens - 1
    # Edit the first user message: only the system prompt's tokens are reused.
    edited = [base[0], Message("user", "An edited first question.")]
    e = run(engine, edited)
    assert e.stats.miss_reason.startswith("history edited at message 2")
    sys_only = engine.prompts.count_tokens([base[0]]) - 0
    assert 0 < e.stats.reused_tokens <= sys_only + 3
    # Change the system prompt.
    s = run(engine, [Message("system", "Be rude."), edited[1]])
    assert s.stats.miss_reason == "system prompt changed"
    # Switch model: the cache cannot carry over.
    engine.switch_model(tiny64)
    m = run(engine, [Message("user", "hi")])
    assert m.stats.miss_reason == "model changed" and m.stats.cache_source == "cold"
    assert m.stats.reused_tokens == 0


def test_token_counts_per_message_add_up(engine):
    msgs = [Message("system", "S."), Message("user", "one two"), Message("assistant", "three")]
    counts = engine.prompts.message_tokens(msgs)
    assert len(counts) == 3 and all(c > 0 for c in counts)
    full = len(engine.loaded.tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in msgs], add_generation_prompt=False))
    assert sum(counts) == full


def test_seed_makes_sampling_reproducible(engine):
    from mlxchat.generation import GenerationSettings

    msgs = [Message("user", "Say something random.")]
    s = GenerationSettings(temperature=1.0, max_tokens=16, seed=7, repetition_penalty=1.2,
                           top_p=0.9, min_p=0.05)
    one = run(engine, msgs, s).reply
    two = run(engine, msgs, s).reply
    other = run(engine, msgs, GenerationSettings(temperature=1.0, max_tokens=16, seed=8)).reply
    assert one == two
    assert one != other
    assert run(engine, msgs, GREEDY).stats.finish_reason == "length"


def test_an_unrelated_conversation_says_so(engine):
    run(engine, [Message("user", "First chat.")])
    other = run(engine, [Message("user", "A different chat entirely.")])
    # Only the template's default system block is shared, and it says so.
    shared = other.stats.reused_tokens
    assert shared > 0 and other.stats.miss_reason == (
        f"the first message differs: trimmed back to the template's opening ({shared} tokens)")


def test_template_that_rewrites_earlier_turns_is_named(tmp_path):
    """Like reasoning models that drop earlier thinking: an earlier reply renders
    shorter in the next prompt than the tokens the cache holds for it."""
    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model

    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['role'] == 'assistant' and not loop.last %}{{ m['content'][:2] }}"
        "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    loaded = load_folder(write_tiny_model(tmp_path / "t", chat_template=template))
    engine = ChatEngine(loaded)
    try:
        msgs = [Message("user", "Hello there.")]
        first = run(engine, msgs)
        assert len(first.reply) > 2
        follow = run(engine, msgs + [Message("assistant", first.reply), Message("user", "More.")])
        assert follow.stats.miss_reason == "template re-rendered an earlier turn"
        assert 0 < follow.stats.reused_tokens < first.stats.context_used
    finally:
        engine.close()


def test_editing_the_first_message_is_called_an_edit(engine):
    # No system prompt: the template's default one is still shared with the cache.
    first = run(engine, [Message("user", "Tell me about rivers.")])
    edited = run(engine, [Message("user", "Tell me about mountains.")])
    shared = edited.stats.reused_tokens
    assert 0 < shared < first.stats.context_used
    # Never "nothing in common" while reusing tokens.
    assert edited.stats.miss_reason == (
        f"the first message differs: trimmed back to the template's opening ({shared} tokens)")
