"""Speculative decoding (a draft model, prompt lookup) on tiny random models:
greedy replies are token for token those of plain decoding, untrimmable caches
and foreign vocabularies are refused, and the caches stay what their token
lists say after a cancel."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import EngineError, TextDelta, TurnDone
from mlxchat.engine.kv import prompt_cache
from mlxchat.engine.speculative.lookup import Proposer
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model

from .conftest import run
from tests.families.builders import FAMILIES, write_family_model

PLAIN = GenerationSettings(temperature=0.0, max_tokens=24, speculative="off")
WIDE = dict(hidden_size=128, num_heads=2, num_kv_heads=1, intermediate_size=128)


def _family(tmp_path_factory, name: str, seed: int = 0):
    fam = next(f for f in FAMILIES if f.name == name)
    return load_folder(write_family_model(fam, tmp_path_factory.mktemp(name), seed=seed))


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny, tiny64):
    """Targets and drafts by name: each draft shares its target's tokenizer."""
    def folder(name, **kw):
        return load_folder(write_tiny_model(tmp_path_factory.mktemp(name), **kw))
    return {
        "llama": tiny, "llama-draft": folder("llama-draft", seed=1),
        "llama64": tiny64, "llama64-draft": folder("llama64-draft", seed=1, **WIDE),
        "qwen3": _family(tmp_path_factory, "qwen3"),
        "qwen3-draft": _family(tmp_path_factory, "qwen3", seed=1),
    }


def _turns(engine: ChatEngine, settings: GenerationSettings) -> list[TurnDone]:
    """Two turns, the second after the first's reply (the cache is reused)."""
    msgs = [Message("system", "You are terse."), Message("user", "abc abc abc abc abc")]
    first = run(engine, msgs, settings)
    msgs += [Message("assistant", first.reply), Message("user", "and again: abc abc")]
    return [first, run(engine, msgs, settings)]


def _plain(model, settings: GenerationSettings) -> tuple[list[TurnDone], list[int]]:
    """The two turns by plain decoding, and the tokens its cache then holds."""
    plain = ChatEngine(model)
    try:
        return _turns(plain, settings), plain.cached_tokens
    finally:
        plain.close()


CASES = [("llama", "llama-draft", None), ("llama", "llama", None),
         ("llama64", "llama64-draft", 4), ("llama64", "llama64", 4),
         ("qwen3", "qwen3-draft", None), ("qwen3", "qwen3", None)]


@pytest.mark.parametrize("target,draft,kv_bits", CASES)
def test_draft_model_replies_token_for_token_as_plain(models, target, draft, kv_bits):
    settings = replace(PLAIN, kv_bits=kv_bits)
    expected, plain_held = _plain(models[target], settings)
    engine = ChatEngine(models[target])
    engine.set_draft(models[draft], draft)
    got = _turns(engine, replace(settings, speculative="draft"))
    assert [d.token_ids for d in got] == [d.token_ids for d in expected]
    # The model's cache ends as plain decoding leaves it: the same reuse.
    assert engine.cached_tokens == plain_held
    assert [d.stats.prefilled_tokens for d in got] == [d.stats.prefilled_tokens for d in expected]
    for done in got:
        s = done.stats
        assert s.spec_mode == "draft" and s.draft_tokens_proposed > 0
        assert s.target_passes * s.tokens_per_pass == pytest.approx(s.generated_tokens)
    if draft == target:  # a model drafting for itself proposes what it then samples
        assert all(d.stats.acceptance > 0.7 for d in got)
        assert all(d.stats.target_passes < d.stats.generated_tokens for d in got)
    # The draft's cache holds a prefix of what the target's holds.
    held = engine.cached_tokens
    assert engine.draft_cached_tokens == held[:len(engine.draft_cached_tokens)]
    # It lags by at most the last accepted proposal and the reply's last token
    # (fed to the model alone, as plain decoding does); the next turn catches up.
    assert len(engine.draft_cached_tokens) >= len(held) - 2
    engine.close()


@pytest.mark.parametrize("target,kv_bits", [("llama", None), ("llama64", 4), ("qwen3", None)])
def test_prompt_lookup_replies_token_for_token_as_plain(models, target, kv_bits):
    settings = replace(PLAIN, kv_bits=kv_bits)
    expected, held = _plain(models[target], settings)
    engine = ChatEngine(models[target])
    got = _turns(engine, replace(settings, speculative="lookup"))
    assert [d.token_ids for d in got] == [d.token_ids for d in expected]
    assert all(d.stats.spec_mode == "lookup" for d in got)
    # The cache ends as plain decoding leaves it (the last shown token fed):
    # the next turn reuses and prefills the same.
    assert engine.cached_tokens == held
    assert [(d.stats.reused_tokens, d.stats.prefilled_tokens) for d in got] == \
        [(d.stats.reused_tokens, d.stats.prefilled_tokens) for d in expected]
    engine.close()


def test_prompt_lookup_accepts_proposals_when_the_reply_repeats(models):
    engine = ChatEngine(models["llama"])
    done = run(engine, [Message("user", "ab ab ab ab ab ab ab ab")],
               replace(PLAIN, max_tokens=48, speculative="lookup"))
    ids = done.token_ids
    # The tiny model's greedy reply falls into a loop, which lookup can propose.
    assert any(ids[i:i + 3] == ids[j:j + 3] for i in range(len(ids) - 3)
               for j in range(i + 1, len(ids) - 3))
    s = done.stats
    assert s.draft_tokens_accepted > 0 and s.target_passes < s.generated_tokens
    engine.close()


def propose(history, k):
    return Proposer(history).propose(k)


def test_propose_takes_what_followed_the_last_occurrence():
    assert propose([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3], 2) == [7, 5]
    assert propose([4, 5, 6], 3) == []
    assert propose([8, 1, 8, 1], 4) == [8, 1]
    assert propose([8, 1, 7, 8], 4) == []  # one token alone proposes nothing


def test_proposals_follow_the_history_as_it_grows():
    """The index answers as a scan of the whole history would, token by token."""
    import random

    rng = random.Random(7)
    tokens = [rng.randrange(6) for _ in range(400)]
    grown = Proposer(tokens[:5])
    for i in range(5, len(tokens)):
        history = tokens[:i]
        scan = []
        for n in (3, 2):
            tail = history[-n:]
            hit = next((s for s in range(len(history) - n - 1, -1, -1)
                        if history[s:s + n] == tail), None)
            if hit is not None:
                scan = history[hit + n:hit + n + 3]
                break
        assert grown.propose(3) == scan == Proposer(history).propose(3)
        grown.extend([tokens[i]])


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    return _family(tmp_path_factory, "gemma3")


def test_sliding_window_model_is_refused_and_nothing_changes(gemma, models):
    engine = ChatEngine(gemma)
    with pytest.raises(EngineError, match="RotatingKVCache"):
        engine.set_draft(gemma, "gemma")
    assert engine.draft_spec is None
    assert "RotatingKVCache" in engine.speculation_problem("lookup")
    with pytest.raises(EngineError, match="cannot be trimmed"):
        run(engine, [Message("user", "hi")], replace(PLAIN, speculative="lookup"))
    engine.close()
    llama = ChatEngine(models["llama"])
    with pytest.raises(EngineError, match="draft"):
        llama.set_draft(gemma, "gemma")  # the draft's caches are checked too
    llama.close()


def test_draft_with_another_vocabulary_is_refused(tmp_path_factory, models):
    foreign = _family(tmp_path_factory, "llama3")
    engine = ChatEngine(models["llama"])
    engine.set_draft(models["llama-draft"], "llama-draft")
    with pytest.raises(EngineError, match="vocabulary"):
        engine.set_draft(foreign, "llama3")
    assert engine.draft_spec == "llama-draft"  # the previous draft stays
    engine.close()


def test_cancel_mid_speculation_keeps_the_caches_consistent(models):
    msgs = [Message("user", "abc abc abc abc")]
    settings = replace(PLAIN, max_tokens=200)
    engine = ChatEngine(models["llama"])
    engine.set_draft(models["llama"], "self")
    seen = 0
    for event in engine.turn(msgs, replace(settings, speculative="draft")):
        if isinstance(event, TextDelta):
            seen += 1
            if seen == 7:
                engine.cancel()
        elif isinstance(event, TurnDone):
            done = event
    assert done.stats.finish_reason == "cancelled" and done.stats.generated_tokens < 200
    live, draft = engine.live_view(), engine.draft_view()
    assert len(live.tokens) == live.length == prompt_cache.offset(live.cache())
    assert len(draft.tokens) == draft.length == prompt_cache.offset(draft.cache())
    assert draft.tokens == live.tokens[:len(draft.tokens)]
    follow = msgs + [Message("assistant", done.reply), Message("user", "go on")]
    got = run(engine, follow, replace(PLAIN, speculative="draft"))
    assert got.stats.reused_tokens > 0
    plain = ChatEngine(models["llama"])
    assert got.token_ids == run(plain, follow, PLAIN).token_ids
    plain.close()
    engine.close()


def _three(engine: ChatEngine, settings: GenerationSettings) -> list[TurnDone]:
    done = _turns(engine, settings)
    msgs = [Message("system", "You are terse."), Message("user", "abc abc abc abc abc"),
            Message("assistant", done[0].reply), Message("user", "and again: abc abc"),
            Message("assistant", done[1].reply), Message("user", "abc abc abc, once more")]
    return done + [run(engine, msgs, settings)]


def _auto_turns(engine: ChatEngine, settings: GenerationSettings) -> list[tuple]:
    """Three turns; after each, what auto measured and the tokens it replayed."""
    msgs = [Message("system", "You are terse."), Message("user", "abc abc abc abc abc")]
    seen = []
    for then in ("and again: abc abc", "abc abc abc, once more", None):
        done = run(engine, msgs, settings)
        cached = engine.live_view().tokens  # also waits for the job queued after the turn
        seen.append((done, engine.verify_cost(), cached[:done.stats.prompt_tokens]))
        if then:
            msgs += [Message("assistant", done.reply), Message("user", then)]
    return seen


@pytest.mark.parametrize("ratio", [1.0, 10.0])
def test_auto_decides_each_reply_by_what_it_measured(models, ratio):
    """The first reply is plain; after it a verifying pass is timed (here: at
    ``ratio`` decode steps), and after every reply lookup is replayed over
    it: the next reply uses lookup exactly when that forecast says it pays.
    The replies are plain decoding's either way."""
    from mlxchat.engine.speculative.auto import MARGIN, VerifyCost, replayed_speedup

    def timed(model, layers, *, proposed, step_s):
        return VerifyCost(proposed, ratio, prompt_cache.offset(layers))

    auto = replace(PLAIN, speculative="auto")
    plain = ChatEngine(models["llama"])
    want = [d.token_ids for d, _, _ in _auto_turns(plain, replace(PLAIN, speculative="off"))]
    plain.close()
    engine = ChatEngine(models["llama"], measure_verify=timed)
    assert engine.verify_cost() is None
    seen = _auto_turns(engine, auto)
    assert seen[0][0].stats.spec_mode == "off"
    for (done, cost, history), (after, _, _) in zip(seen, seen[1:]):
        forecast, kept = replayed_speedup(history, done.token_ids, k=auto.draft_tokens,
                                          ratio=ratio)
        if done.stats.spec_mode == "off":  # no lookup speed measured yet: the forecast alone
            assert cost.choice.speedup == pytest.approx(forecast)
        assert cost.choice.accepted == pytest.approx(kept)
        assert after.stats.spec_mode == ("lookup" if cost.choice.speedup >= MARGIN else "off")
    if ratio == 10.0:  # a pass of 4 tokens at 10 steps never pays
        assert all(d.stats.spec_mode == "off" for d, _, _ in seen)
    assert [d.token_ids for d, _, _ in seen] == want
    assert engine.live_view().length == len(engine.cached_tokens)
    engine.close()


def test_auto_stays_plain_with_a_seed_and_on_caches_that_cannot_trim(models, gemma):
    engine = ChatEngine(models["llama"])
    seeded = replace(PLAIN, speculative="auto", temperature=0.8, seed=7)
    assert all(d.stats.spec_mode == "off" for d in _three(engine, seeded))
    assert engine.verify_cost() is None  # never measured: it would not be used
    engine.close()
    sliding = ChatEngine(gemma)
    assert sliding.speculation_problem("auto") is None  # auto is never refused
    done = _turns(sliding, replace(PLAIN, speculative="auto"))
    assert [d.stats.spec_mode for d in done] == ["off", "off"]
    assert sliding.verify_cost() is None
    sliding.close()


def test_lookup_is_priced_by_replaying_it_over_the_reply():
    from mlxchat.engine.speculative.auto import replayed_speedup

    history = list(range(100, 140))
    copied = history[10:30]  # a reply that quotes the prompt: lookup keeps most
    speedup, kept = replayed_speedup(history, copied, k=3, ratio=1.5)
    assert kept > 0.8 and speedup > 1.5
    fresh = list(range(500, 520))  # nothing to look up: no proposal, plain's steps
    assert replayed_speedup(history, fresh, k=3, ratio=1.5) == (1.0, 0.0)
    # Free verification cannot lose; dear verification loses on a poor reply.
    mixed = history[10:14] + list(range(600, 616))
    assert replayed_speedup(history, mixed, k=3, ratio=1.0)[0] >= 1.0
    assert replayed_speedup(history, mixed, k=3, ratio=4.0)[0] < 1.0


def test_a_lookup_reply_measured_slower_than_plain_turns_lookup_off():
    """The issue's reply: lookup on, 11% of proposals kept, 20.0 tok/s against
    plain decoding's 41.6. Its measured speed corrects the replay's forecast,
    so a reply the replay prices above the margin no longer turns lookup on."""
    from mlxchat.engine.speculative.auto import MARGIN, VerifyCost

    history = list(range(100, 140))
    cost = VerifyCost(3, 1.2, 100).after(mode="off", decode_tps=41.6, history=history,
                                         reply=history[5:25])
    assert cost.pays and cost.choice.plain_tps == 41.6 and "lookup is on" in cost.words()
    cost = cost.after(mode="lookup", decode_tps=20.0, history=history, reply=history[5:25])
    assert cost.choice.calibration < 0.5 and not cost.pays
    assert "auto stays off" in cost.words() and "measured speed" in cost.words()
    again = cost.after(mode="off", decode_tps=41.0, history=history,
                       reply=history[5:9] + list(range(700, 716)))
    assert again.choice.speedup < MARGIN and not again.pays
