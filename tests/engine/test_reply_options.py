"""A request's biases, penalties, log-probabilities and choices, on a tiny
random model: each changes (or reports) what the reply samples, alone and
in a batch."""

from __future__ import annotations


import mlx.core as mx
import numpy as np
import pytest

from mlxchat.chat import Message
from mlxchat.engine.batch.decoder import BatchDecoder
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import ChoiceDone, EngineError, PromptLogprobs, TextDelta, TurnDone
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.engine.prompt.render import render
from mlxchat.engine.thread.compute import ComputeLock
from mlxchat.engine.turn.reply_options import ReplyOptions
from mlxchat.generation import GenerationSettings

GREEDY = GenerationSettings(temperature=0.0, max_tokens=16)
ASK = [Message("user", "Tell me about rivers and lakes.")]


def _events(engine: ChatEngine, options: ReplyOptions, settings=GREEDY, messages=ASK):
    return list(engine.turn(messages, settings, options=options))


def _done(events) -> TurnDone:
    return next(e for e in events if isinstance(e, TurnDone))


@pytest.fixture
def batched(tiny):
    """An engine whose replies decode in a batch (as the server's slots do)."""
    lock = ComputeLock()
    batch = BatchDecoder(tiny.model, size=4, compute=lock)
    engine = ChatEngine(tiny, compute=lock)
    engine.decode_in(batch)
    yield engine
    engine.close()
    batch.close()


@pytest.fixture(params=["alone", "batched"])
def any_engine(request, engine, batched):
    return engine if request.param == "alone" else batched


def test_banning_the_reply_s_own_tokens_changes_it(any_engine):
    first = _done(_events(any_engine, ReplyOptions()))
    banned = sorted(set(first.token_ids) - set(any_engine.loaded.tokenizer.eos_token_ids))
    assert banned
    again = _done(_events(any_engine, ReplyOptions(logit_bias=tuple((t, -100.0)
                                                                    for t in banned))))
    assert again.token_ids and not set(again.token_ids) & set(banned)


def test_a_large_bias_forces_a_token(any_engine):
    done = _done(_events(any_engine, ReplyOptions(logit_bias=((65, 100.0),))))
    assert done.token_ids[:5] == [65] * 5


def test_penalties_stop_a_repeated_token(engine):
    # A bias that makes token 65 the likeliest by far: without a penalty the
    # reply is nothing else; a frequency penalty of a third of the bias lets
    # others in after three; a presence penalty above it after one.
    def reply(**penalty):
        return _done(_events(engine, ReplyOptions(logit_bias=((65, 30.0),),
                                                  **penalty))).token_ids
    plain = reply()
    assert plain.count(65) == len(plain)
    assert reply(frequency_penalty=10.0)[:3] == [65] * 3
    assert reply(frequency_penalty=10.0).count(65) < len(plain) // 2
    assert reply(presence_penalty=40.0).count(65) == 1


def test_logprobs_are_the_model_s_own_log_softmax(engine, tiny):
    events = _events(engine, ReplyOptions(logprobs=3))
    done = _done(events)
    said = [lp for e in events if isinstance(e, TextDelta) for lp in e.logprobs]
    ends = set(tiny.tokenizer.eos_token_ids)
    assert [lp.token for lp in said] == [t for t in done.token_ids if t not in ends]
    # Recompute the first sampled token's distribution from the prompt alone.
    prompt = render(tiny.tokenizer, ASK)
    logits = tiny.model(mx.array(prompt)[None])[0, -1].astype(mx.float32)
    expected = np.array(logits - mx.logsumexp(logits))
    first = said[0]
    assert first.logprob == pytest.approx(float(expected[first.token]), abs=1e-4)
    assert [t for t, _ in first.top] == list(np.argsort(-expected)[:3])
    assert first.top[0][0] == first.token  # greedy: the likeliest was sampled
    assert all(a[1] >= b[1] for a, b in zip(first.top, first.top[1:]))


def test_logprobs_leave_out_the_bias(engine):
    plain = [lp for e in _events(engine, ReplyOptions(logprobs=0))
             if isinstance(e, TextDelta) for lp in e.logprobs]
    biased = [lp for e in _events(engine, ReplyOptions(logprobs=0, logit_bias=((65, 100.0),)))
              if isinstance(e, TextDelta) for lp in e.logprobs]
    assert biased[0].token == 65
    assert biased[0].logprob < plain[0].logprob  # raw: not the biased certainty
    assert biased[0].top == ()


def test_batched_logprobs_match_alone(engine, batched):
    def said(e):
        return [(lp.token, round(lp.logprob, 4)) for ev in _events(e, ReplyOptions(logprobs=2))
                if isinstance(ev, TextDelta) for lp in ev.logprobs]
    assert said(batched) == said(engine)


def test_prompt_logprobs(engine, tiny):
    prompt = render(tiny.tokenizer, ASK)
    events = list(engine.turn(FittedPrompt(prompt, [], 0), GREEDY,
                              options=ReplyOptions(logprobs=2, prompt_logprobs=True)))
    scored = next(e for e in events if isinstance(e, PromptLogprobs)).entries
    assert len(scored) == len(prompt) and scored[0] is None
    logits = tiny.model(mx.array(prompt)[None])[0].astype(mx.float32)
    lp = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
    for i in (1, len(prompt) // 2, len(prompt) - 1):
        assert scored[i].token == prompt[i]
        assert scored[i].logprob == pytest.approx(float(lp[i - 1, prompt[i]]), abs=1e-4)
        assert len(scored[i].top) == 2


def test_choices(any_engine, tiny):
    settings = GenerationSettings(temperature=1.0, max_tokens=12, seed=7)
    events = _events(any_engine, ReplyOptions(choices=3), settings)
    done = _done(events)
    others = {e.choice: e for e in events if isinstance(e, ChoiceDone)}
    assert sorted(others) == [1, 2]
    assert isinstance(events[-1], TurnDone)
    for i, other in others.items():
        text = "".join(e.text for e in events if isinstance(e, TextDelta) and e.choice == i)
        assert text == other.reply and other.generated_tokens == len(other.token_ids)
    kept = "".join(e.text for e in events if isinstance(e, TextDelta) and e.choice == 0)
    assert kept == done.reply
    replies = [done.token_ids] + [o.token_ids for o in others.values()]
    assert len({tuple(r) for r in replies}) == 3  # three seeds, three replies
    # The same seed gives the same other choices.
    again = {e.choice: e.token_ids for e in _events(any_engine, ReplyOptions(choices=3),
                                                     settings) if isinstance(e, ChoiceDone)}
    assert again == {i: o.token_ids for i, o in others.items()}


def test_choices_keep_the_first_reply_s_cache(engine, tiny):
    """The conversation's cache after two choices is the one a single reply
    leaves: the same tokens, the same arrays."""
    done = _done(_events(engine, ReplyOptions(choices=2)))
    view = engine.live_view()
    alone = ChatEngine(tiny)
    try:
        single = _done(_events(alone, ReplyOptions()))
        expected = alone.live_view()
    finally:
        alone.close()
    assert done.token_ids == single.token_ids
    assert view.tokens == expected.tokens and view.length == len(view.tokens)
    for mine, theirs in zip(view.cache(), expected.cache()):
        assert np.allclose(np.array(mine.keys), np.array(theirs.keys), atol=1e-5)


def test_options_out_of_range_are_refused(engine):
    with pytest.raises(EngineError, match="vocabulary"):
        _events(engine, ReplyOptions(logit_bias=((10**6, 1.0),)))
    with pytest.raises(EngineError, match="choices"):
        _events(engine, ReplyOptions(choices=9))


def test_choices_refused_on_a_quantized_cache(engine):
    with pytest.raises(EngineError, match="quantized"):
        _events(engine, ReplyOptions(choices=2), GenerationSettings(temperature=0.0,
                                                                    max_tokens=4, kv_bits=8))


def _through(deltas: list[TextDelta], k: int) -> tuple[str, int] | None:
    """A stop string the reply first writes with its ``k``-th delta (the text
    of the deltas after the first up to it, trimmed), and the tokens sampled
    once it is written."""
    stop = "".join(d.text for d in deltas[1:k + 1]).strip()
    full = "".join(d.text for d in deltas)
    written = sum(len(d.text) for d in deltas[:k + 1])
    if not stop.isascii() or not stop.isprintable() or full.find(stop) + len(stop) != written:
        return None
    return stop, deltas[k].generated_tokens


def test_a_stop_string_ends_each_choice_where_it_is_written(any_engine):
    settings = GenerationSettings(temperature=0.0, max_tokens=24)
    plain = [e for e in _events(any_engine, ReplyOptions(), settings)
             if isinstance(e, TextDelta)]
    stop, generated = next(f for k in range(4, len(plain) - 2) if (f := _through(plain, k)))
    events = _events(any_engine, ReplyOptions(choices=2, stops=(stop,)), settings)
    ends = [(e.finish_reason, e.generated_tokens) for e in events if isinstance(e, ChoiceDone)]
    done = _done(events)
    ends.append((done.stats.finish_reason, done.stats.generated_tokens))
    assert ends == [("stop", generated)] * 2  # not one token sampled after it
    assert stop in done.reply
    alone = _done(_events(any_engine, ReplyOptions(stops=(stop,)), settings))
    assert (alone.stats.finish_reason, alone.stats.generated_tokens) == ("stop", generated)


def test_the_repetition_penalty_looks_back_over_repetition_context(any_engine):
    # Token 65 only at the prompt's start, ~40 tokens before its end, and
    # biased to be the likeliest: the penalty turns it away only when it
    # looks back that far (Ollama's repeat_last_n: -1 everything, 0 off).
    filler = list(any_engine.loaded.tokenizer.encode("the river flows to the sea and back "))
    assert 65 not in filler and 20 < len(filler) < 63
    prompt = FittedPrompt([65, *filler], [], 0)

    def reply(context: int) -> list[int]:
        settings = GenerationSettings(temperature=0.0, max_tokens=5, repetition_penalty=10.0,
                                      repetition_context=context)
        events = any_engine.turn(prompt, settings, options=ReplyOptions(logit_bias=((65, 10.0),)))
        return _done(events).token_ids

    assert reply(0) == [65] * 5  # off
    assert reply(20)[0] == 65 and reply(64)[0] != 65
    assert reply(-1)[0] != 65 and reply(-1) == reply(10_000)  # the whole context


@pytest.mark.parametrize("context", [20, 64, -1])
def test_lookup_decoding_keeps_the_penalised_reply(engine, context):
    ask = [Message("user", "ab ab ab ab ab ab ab ab")]
    plain, looked_up = [_done(_events(engine, ReplyOptions(), GenerationSettings(
        temperature=0.0, max_tokens=32, repetition_penalty=1.1, repetition_context=context,
        speculative=mode), ask)) for mode in ("off", "lookup")]
    assert looked_up.stats.spec_mode == "lookup" and looked_up.stats.draft_tokens_accepted
    assert looked_up.token_ids == plain.token_ids


def test_stop_text_finds_a_stop_however_the_answer_is_cut_into_segments():
    from mlxchat.engine.turn.reply_options import StopText

    answer = "The keeper wrote: END OF LOG, then slept."
    for stops in (["END OF LOG"], ["x", "END OF LOG"], ["LOG,"], ["The"]):
        for size in (1, 2, 3, 7, len(answer)):
            stop = StopText(stops)
            said = 0
            while said < len(answer) and not stop.met:
                stop.add(answer[said:said + size])
                said += size
            where = min(answer.find(s) + len(s) for s in stops if s in answer)
            assert stop.met and where <= said < where + size, (stops, size, said)
    unmet = StopText(["END OF LOG"])
    for piece in ("END OF", " LO", "g", " END OF LO"):
        unmet.add(piece)
    assert not unmet.met
    unmet.add("G")
    assert unmet.met
    assert not StopText([]).met and not StopText([""]).met
