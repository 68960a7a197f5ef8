"""Sampling a reply on the engine thread: the tail fed, then tokens from a
stream until an end token, a budget or a cancel; reasoning and answer are
streamed as separate parts, with the figures as they grow.

A spent reasoning budget closes the reasoning as the family writes it (the
think-end tag, or gpt-oss's end of the analysis message and head of the
final one) and the answer is sampled after it, as llama.cpp's reasoning
budget does: the stream is closed (the cache holds every token it yielded)
and opened again with the closing tokens as its prompt. They are part of
the reply's ids, so the token ledger holds what the model saw.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import mlx.core as mx
from mlx_lm.sample_utils import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    make_logits_processors,
    make_sampler,
)

from mlxchat.engine.events import Event, TextDelta, TokenLogprob
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.results import Decode
from mlxchat.engine.speculative.streams import Stream
from mlxchat.engine.turn import reasoning
from mlxchat.engine.turn import reply_options
from mlxchat.engine.turn.constrained import CompiledFormat
from mlxchat.engine.turn.reply_options import LogprobTap, ReplyOptions
from mlxchat.generation import GenerationSettings
from mlxchat.models.markup import cached_markup

OpenStream = Callable[..., Stream]
"""``(tail=, history=, budget=, sampler=, processors=, count=)`` -> the
reply's token stream after ``tail`` (``history``: the whole prompt, tail
included)."""


@dataclass(frozen=True)
class Reply:
    """What a reply is sampled under."""

    settings: GenerationSettings
    window: int
    """The context window the reply must fit in."""
    turn_start: float
    """``perf_counter`` at the turn's start (the time to first token counts from it)."""
    prompt_tokens: Sequence[int] = ()
    output: CompiledFormat | None = None
    """The schema the reply follows (None: free text)."""
    options: ReplyOptions = ReplyOptions()
    """Biases, penalties and log-probabilities the request asks for."""
    sampler: Callable[[Any], Any] | None = None
    """A sampler of its own (another choice's seed), else the settings'."""


class _Sampling:
    """One reply's tokens as they come: labelled, shown, counted, and checked
    against the budgets."""

    def __init__(self, tokenizer: Any, live: LiveCache, reply: Reply,
                 emit: Callable[[Event], None]):
        self.tokenizer, self.live, self.reply, self.emit = tokenizer, live, reply, emit
        settings = reply.settings
        self.split = reasoning.Splitter.for_prompt(tokenizer, reply.prompt_tokens,
                                                   cached_markup(tokenizer))
        self.think_budget = settings.max_reasoning_tokens if self.split.markup.reasons else 0
        self.out = Decode(finish_reason="length")
        self.text = reasoning.PartText(tokenizer.detokenizer, self._shown)
        self.t_prompt = time.perf_counter()
        self.first_at: float | None = None
        self.forced = 0
        self.tap: LogprobTap | None = None
        """The open stream's log-probabilities, when asked for."""
        self.logprobs: list[TokenLogprob] = []
        """Sampled tokens' figures not yet said with a delta."""

    def _shown(self, segment: str, part: str) -> None:
        out = self.out
        (out.reasoning_pieces if part == reasoning.REASONING else out.pieces).append(segment)
        said, self.logprobs = tuple(self.logprobs), []
        self.emit(TextDelta(segment, out.generated, out.decode_tps, part=part,
                            acceptance=out.speculation.acceptance,
                            tokens_per_pass=out.speculation.tokens_per_pass(out.generated),
                            logprobs=said))

    def room(self, feeding: Sequence[int]) -> int:
        """Tokens the window leaves for sampling after ``feeding`` is fed: every
        sampled token counts, the last one too (the next turn feeds it)."""
        return self.reply.window - len(self.live.tokens) - len(feeding)

    def take(self, gen: Stream, cancelled: Callable[[], bool]) -> tuple[int, ...]:
        """Sample from ``gen`` until the reply ends (returns ()) or the reasoning
        budget closes the reasoning (returns the closing tokens, not yet fed)."""
        out, split, settings = self.out, self.split, self.reply.settings
        for token, _ in gen:
            self.live.tokens.append(token)
            out.token_ids.append(token)
            if self.tap is not None:
                figures = self.tap.take(token)  # every step's, in order
                if token not in self.tokenizer.eos_token_ids:
                    self.logprobs.append(figures)
            now = time.perf_counter()
            if self.first_at is None:
                self.first_at = now
                out.ttft_s, out.first_pass_s = now - self.reply.turn_start, now - self.t_prompt
            out.generated += 1
            if out.generated - self.forced > 1:  # the end token was sampled too: it counts
                out.decode_tps = (out.generated - self.forced - 1) / max(now - self.first_at,
                                                                         1e-9)
            if token in self.tokenizer.eos_token_ids:
                out.finish_reason = "stop"
                self.text.add(split.end(token))
                return ()
            was = split.part
            self.text.add(split.feed(token))
            out.reasoning_tokens = split.reasoning_tokens
            if reasoning.REASONING in (was, split.part):
                out.reasoning_s = now - self.t_prompt
            if cancelled():
                out.finish_reason = "cancelled"
                return ()
            if split.answer_tokens >= settings.max_tokens:
                return ()  # the answer's budget is spent: finish_reason stays 'length'
            if split.part == reasoning.REASONING and split.reasoning_tokens >= self.think_budget:
                closing = split.closing()
                if closing is None:
                    continue  # a header is being read: close once it is
                if not closing or out.reasoning_closed or self.room(closing) < 1:
                    return ()  # 'length': nothing to close with, or no room to answer
                return closing
        return ()

    def close_reasoning(self, closing: Sequence[int]) -> None:
        """The closing tokens become the reply's, as if sampled (the stream that
        follows feeds them)."""
        out = self.out
        out.token_ids.extend(closing)
        out.generated += len(closing)
        self.forced += len(closing)
        self.text.add(self.split.force(closing))
        out.reasoning_tokens = self.split.reasoning_tokens
        out.reasoning_s = time.perf_counter() - self.t_prompt
        out.reasoning_closed = True

    def finish(self) -> None:
        self.text.add(self.split.flush())
        self.text.close()


def decode(tokenizer: Any, live: LiveCache, tail: list[int], reply: Reply, *,
           open_stream: OpenStream, emit: Callable[[Event], None],
           cancelled: Callable[[], bool]) -> Decode:
    """Feed the tail and sample until an end token, a budget or a cancel."""
    settings = reply.settings
    run = _Sampling(tokenizer, live, reply, emit)
    budget = max(1, min(settings.max_tokens + run.think_budget, run.room(tail)))
    feeding, history = tuple(tail), list(reply.prompt_tokens)
    base = sampling(settings)
    sampler = reply.sampler or base["sampler"]
    # The grammar's mask last: no later processor lifts it.
    masks = [reply.output.processor()] if reply.output is not None else []
    try:
        while feeding:
            run.tap, asked = reply_options.processors(reply.options, before=run.out.token_ids,
                                                      skip=len(feeding))
            gen = open_stream(tail=list(feeding), history=history, budget=budget,
                              count=run.out.speculation, sampler=sampler,
                              processors=[*asked, *base["processors"], *masks])
            live.tokens.extend(feeding)
            try:
                closing = run.take(gen, cancelled)
            finally:
                gen.close()
            if closing:
                history = list(live.tokens) + list(closing)
                run.close_reasoning(closing)
                # The answer's budget, the end token included.
                budget = max(1, min(settings.max_tokens - run.split.answer_tokens + 1,
                                    run.room(closing)))
            feeding = closing
    finally:
        run.finish()
    run.out.window_full = (run.out.finish_reason == "length"
                           and len(live.tokens) >= reply.window)
    return run.out


def _sampler(settings: GenerationSettings) -> Callable[[mx.array], mx.array]:
    """mlx-lm's sampler; a ``top_k`` as large as the vocabulary cuts nothing (mlx-lm
    raises on it, mid-turn, and a client may ask any whole number)."""
    whole = make_sampler(settings.temperature, settings.top_p, settings.min_p)
    k = settings.top_k or 0
    if not k:
        return whole
    cut = make_sampler(settings.temperature, settings.top_p, settings.min_p, top_k=k)
    return lambda logprobs: whole(logprobs) if k >= logprobs.shape[-1] else cut(logprobs)


def seeded_sampler(settings: GenerationSettings, seed: int) -> Callable[[mx.array], mx.array]:
    """The settings' sampler drawing from a random key of its own (another
    choice of the same prompt): its draws do not depend on what else samples
    meanwhile, so a seed gives the same choice every time."""
    temp = settings.temperature or 0.0
    if not temp:
        return _sampler(settings)
    # Each draw's key made where it samples: an array left lazy on one thread's
    # stream cannot be computed on another's (the batch's).
    keys = random.Random(seed)

    def sample(logprobs: mx.array) -> mx.array:
        if settings.top_p is not None and 0 < settings.top_p < 1:
            logprobs = apply_top_p(logprobs, settings.top_p)
        if settings.min_p:
            logprobs = apply_min_p(logprobs, settings.min_p)
        if settings.top_k and settings.top_k < logprobs.shape[-1]:
            logprobs = apply_top_k(logprobs, settings.top_k)
        draw = mx.random.key(keys.getrandbits(63))
        return mx.random.categorical(logprobs * (1.0 / temp), key=draw)
    return sample


def sampling(settings: GenerationSettings) -> dict[str, Any]:
    """The sampler and logits processors of the settings."""
    penalty = settings.repetition_penalty
    return dict(sampler=_sampler(settings),
                processors=make_logits_processors(
                    repetition_penalty=penalty if penalty != 1.0 else None))
