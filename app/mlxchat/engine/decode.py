"""Sampling a reply on the engine thread: the tail fed, then tokens from a
stream until an end token, a budget or a cancel; reasoning and answer are
streamed as separate parts, with the figures as they grow."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from mlx_lm.sample_utils import make_logits_processors, make_sampler

from mlxchat.chat import GenerationSettings
from mlxchat.engine import reasoning
from mlxchat.engine.events import Event, TextDelta
from mlxchat.engine.live import LiveCache
from mlxchat.engine.results import Decode
from mlxchat.engine.speculative import Stream

OpenStream = Callable[..., Stream]
"""``(budget=, sampler=, processors=, count=)`` -> the reply's token stream."""


@dataclass(frozen=True)
class Reply:
    """What a reply is sampled under."""

    settings: GenerationSettings
    window: int
    """The context window the reply must fit in."""
    turn_start: float
    """``perf_counter`` at the turn's start (the time to first token counts from it)."""
    prompt_tokens: Sequence[int] = ()


def decode(tokenizer: Any, live: LiveCache, tail: list[int], reply: Reply, *,
           open_stream: OpenStream, emit: Callable[[Event], None],
           cancelled: Callable[[], bool]) -> Decode:
    """Feed the tail and sample until an end token, a budget or a cancel."""
    settings = reply.settings
    split = reasoning.Splitter.for_prompt(tokenizer, reply.prompt_tokens,
                                          reasoning.cached_markup(tokenizer))
    think_budget = settings.max_reasoning_tokens if split.markup.reasons else 0
    budget = max(1, min(settings.max_tokens + think_budget,
                        reply.window - len(live.tokens) - len(tail) + 1))
    out = Decode(finish_reason="length")

    def shown(segment: str, part: str) -> None:
        (out.reasoning_pieces if part == reasoning.REASONING else out.pieces).append(segment)
        emit(TextDelta(segment, out.generated, out.decode_tps, part=part,
                       acceptance=out.speculation.acceptance,
                       tokens_per_pass=out.speculation.tokens_per_pass(out.generated)))
    text = reasoning.PartText(tokenizer.detokenizer, shown)
    t_prompt = time.perf_counter()
    gen = open_stream(budget=budget, count=out.speculation, **_sampling(settings))
    live.tokens.extend(tail)
    first_at = None
    try:
        for token, _ in gen:
            live.tokens.append(token)
            out.token_ids.append(token)
            now = time.perf_counter()
            if first_at is None:
                first_at = now
                out.ttft_s, out.first_pass_s = now - reply.turn_start, now - t_prompt
            out.generated += 1
            if out.generated > 1:  # the end token was sampled too: it counts
                out.decode_tps = (out.generated - 1) / max(now - first_at, 1e-9)
            if token in tokenizer.eos_token_ids:
                out.finish_reason = "stop"
                break
            was = split.part
            text.add(split.feed(token))
            out.reasoning_tokens = split.reasoning_tokens
            if reasoning.REASONING in (was, split.part):
                out.reasoning_s = now - t_prompt
            if cancelled():
                out.finish_reason = "cancelled"
                break
            if split.answer_tokens >= settings.max_tokens or (
                    split.part == reasoning.REASONING and split.reasoning_tokens >= think_budget):
                break  # a budget is spent: finish_reason stays 'length'
    finally:
        gen.close()
        text.add(split.flush())
        text.close()
    return out


def _sampling(settings: GenerationSettings) -> dict[str, Any]:
    """The sampler and logits processors of the settings."""
    penalty = settings.repetition_penalty
    return dict(sampler=make_sampler(settings.temperature, settings.top_p, settings.min_p),
                processors=make_logits_processors(
                    repetition_penalty=penalty if penalty != 1.0 else None))

