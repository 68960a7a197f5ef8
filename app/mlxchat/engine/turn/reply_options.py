"""What a request asks of a reply beyond its generation settings (OpenAI's
``logit_bias``, ``presence_penalty``, ``frequency_penalty``, ``logprobs``,
``n`` and ``stop``), and the logits processors that honour them.

The processors run in this order on each step's logits: the log-probability
tap (the model's own log-softmax, as vLLM's ``raw_logprobs``), the biases,
the penalties, then the settings' repetition penalty (``repetition_penalty``
below, over ``repetition_context`` tokens: ``decode.repetition``) and a
schema's mask; the sampler's temperature comes last.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import mlx.core as mx
import numpy as np

from mlxchat.engine.events import EngineError, TokenLogprob
from mlxchat.engine.prompt.jinja import hf_tokenizer
from mlxchat.engine.turn import constrained
from mlxchat.engine.turn.constrained import CompiledFormat
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel

Processor = Callable[[mx.array, mx.array], mx.array]

MAX_CHOICES = 8
"""Choices one turn may sample (each a batch member holding the prompt's KV)."""
MAX_TOP_LOGPROBS = 20
"""Alternatives a token's log-probability may list (OpenAI's own limit)."""
SPECULATION_OFF = "the request shapes or reports each token's probabilities"


@dataclass(frozen=True)
class ReplyOptions:
    """Per-reply sampling asks; the defaults change nothing."""

    logit_bias: tuple[tuple[int, float], ...] = ()
    """(token id, added to its logit) pairs; -100 bans a token, 100 forces it."""
    presence_penalty: float = 0.0
    """Subtracted once from the logit of every token the reply holds already."""
    frequency_penalty: float = 0.0
    """Subtracted from a token's logit for each time the reply holds it."""
    logprobs: int | None = None
    """None: not reported; k: each sampled token's log-probability and the k
    likeliest alternatives (``TextDelta.logprobs``)."""
    choices: int = 1
    """Replies sampled from one prompt (OpenAI's ``n``): the first is the
    conversation's, the others are said (``ChoiceDone``) and kept nowhere."""
    prompt_logprobs: bool = False
    """The prompt's own tokens' log-probabilities too (``PromptLogprobs``, with
    ``logprobs`` alternatives each): the prompt is then computed whole."""
    stops: tuple[str, ...] = ()
    """Texts that end a reply where its answer first writes one: a choice
    that wrote one samples no further (its text is said up to the token that
    wrote it; the caller cuts it there)."""

    @property
    def shapes(self) -> bool:
        """Anything changes or reads the logits (speculation then stays off)."""
        return bool(self.logit_bias or self.presence_penalty or self.frequency_penalty
                    or self.logprobs is not None or self.prompt_logprobs)

    def check(self, vocabulary: int) -> None:
        """EngineError (one line) for a value out of range."""
        bad = [t for t, _ in self.logit_bias if not 0 <= t < vocabulary]
        if bad:
            raise EngineError(f"token id {bad[0]} is not in this model's vocabulary "
                              f"(0 to {vocabulary - 1})")
        if not 1 <= self.choices <= MAX_CHOICES:
            raise EngineError(f"a turn samples 1 to {MAX_CHOICES} choices, not {self.choices}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise EngineError(f"a token lists 0 to {MAX_TOP_LOGPROBS} alternatives")
        if self.prompt_logprobs and self.logprobs is None:
            raise EngineError("the prompt's log-probabilities need a number of alternatives")


ASKS_NOTHING = ReplyOptions()


def vocabulary(loaded: LoadedModel) -> int:
    """Token ids a bias may name: the tokenizer's, within the model's logits."""
    size = len(hf_tokenizer(loaded.tokenizer))
    logits = getattr(getattr(loaded.model, "args", None), "vocab_size", None)
    return min(size, logits) if isinstance(logits, int) else size


def decoded_under(settings: GenerationSettings, output: CompiledFormat | None,
                  options: ReplyOptions, *, loaded: LoadedModel, split: bool
                  ) -> tuple[GenerationSettings, str | None]:
    """The settings a turn with a schema (``output``) and ``options`` decodes
    under, and why speculation is off for it; EngineError for options out of range."""
    options.check(vocabulary(loaded))
    settings, schema_off = constrained.speculation_off(settings, output, split=split)
    settings, asked_off = speculation_off(settings, options, split=split)
    return settings, schema_off or asked_off


def speculation_off(settings: GenerationSettings, options: ReplyOptions, *, split: bool
                    ) -> tuple[GenerationSettings, str | None]:
    """The settings a turn decodes under and why speculation is off for it:
    a proposal's tokens would skip the processors and the tap."""
    if not options.shapes and options.choices == 1:
        return settings, None
    if split:
        raise EngineError("logit biases, penalties, log-probabilities and several choices "
                          "are not supported on a model split across machines")
    if settings.speculative == "off":
        return settings, None
    return dataclasses.replace(settings, speculative="off"), SPECULATION_OFF


class LogprobTap:
    """The first processor of a stream: keeps each step's log-softmax of the
    model's own logits (evaluated where the step computes, under the compute
    lock), and pairs the oldest with the token sampled from it (``take``)."""

    def __init__(self, top: int):
        self.top = top
        self._rows: deque[np.ndarray] = deque()

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        row = logits[-1].astype(mx.float32)
        row = row - mx.logsumexp(row, keepdims=True)
        mx.eval(row)
        self._rows.append(np.array(row))
        return logits

    def take(self, token: int) -> TokenLogprob:
        """The oldest step's figures for ``token``, sampled from it."""
        return entry(self._rows.popleft(), token, self.top)


def entry(row: np.ndarray, token: int, top: int) -> TokenLogprob:
    """``token``'s log-probability in ``row`` and the ``top`` likeliest there."""
    alternatives: tuple[tuple[int, float], ...] = ()
    if top:
        best = np.argpartition(-row, top - 1)[:top]
        best = best[np.argsort(-row[best], kind="stable")]
        alternatives = tuple((int(i), float(row[i])) for i in best)
    return TokenLogprob(int(token), float(row[token]), alternatives)


def reply_penalty(presence: float, frequency: float, *, before: Sequence[int],
                  skip: int) -> Processor:
    """OpenAI's penalties over the reply's tokens: those sampled before this
    stream (``before``) and the stream's own after the ``skip`` tokens it fed."""
    earlier = mx.array(list(before), dtype=mx.int32) if before else None

    def processor(tokens: mx.array, logits: mx.array) -> mx.array:
        ids = tokens[skip:].astype(mx.int32) if tokens.size > skip else None
        if earlier is not None:
            ids = earlier if ids is None else mx.concatenate([earlier, ids])
        if ids is None:
            return logits
        counts = mx.zeros((logits.shape[-1],), dtype=mx.float32).at[ids].add(1.0)
        return logits - (counts * frequency + (counts > 0) * presence).astype(logits.dtype)
    return processor


def repetition_penalty(penalty: float, context: int, *, before: Sequence[int]) -> Processor:
    """mlx-lm's repetition penalty (a logit divided by ``penalty``, a negative
    one multiplied) on every token among the last ``context`` (-1: all) of
    the context: ``before`` (what precedes the stream) and the stream's own
    tokens, the ones it fed included: what it looks back over does not depend
    on how many of the prompt's tokens the stream's first step feeds."""
    earlier = list(before) if context < 0 else list(before)[max(0, len(before) - context):]
    if context < 0:  # the whole context: a token once is enough
        earlier = sorted(set(earlier))
    ahead = mx.array(earlier, dtype=mx.int32) if earlier else None

    def processor(tokens: mx.array, logits: mx.array) -> mx.array:
        own = tokens.astype(mx.int32) if tokens.size else None
        if own is not None and 0 < context <= own.size:
            ids = own[own.size - context:]
        elif ahead is None or own is None:
            ids = own if ahead is None else ahead
        else:
            need = ahead.size if context < 0 else min(ahead.size, context - own.size)
            ids = mx.concatenate([ahead[ahead.size - need:], own])
        if ids is None:
            return logits
        picked = logits[:, ids]
        logits[:, ids] = mx.where(picked < 0, picked * penalty, picked / penalty)
        return logits
    return processor


def bias(pairs: Sequence[tuple[int, float]]) -> Processor:
    ids = mx.array([t for t, _ in pairs], dtype=mx.int32)
    values = mx.array([v for _, v in pairs], dtype=mx.float32)

    def processor(tokens: mx.array, logits: mx.array) -> mx.array:
        return logits.at[:, ids].add(values.astype(logits.dtype))
    return processor


def processors(options: ReplyOptions, *, before: Sequence[int], skip: int
               ) -> tuple[LogprobTap | None, list[Processor]]:
    """A stream's tap (None: no log-probabilities asked) and its processors,
    the tap first; ``before`` and ``skip`` as ``reply_penalty`` takes them."""
    tap = LogprobTap(options.logprobs) if options.logprobs is not None else None
    out: list[Any] = [tap] if tap is not None else []
    if options.logit_bias:
        out.append(bias(options.logit_bias))
    if options.presence_penalty or options.frequency_penalty:
        out.append(reply_penalty(options.presence_penalty, options.frequency_penalty,
                                 before=before, skip=skip))
    return tap, out


class StopText:
    """Whether a reply's answer, said a segment at a time, has written one of
    ``stops`` (a stop may span segments)."""

    def __init__(self, stops: Sequence[str]):
        self.stops = tuple(s for s in stops if s)
        self._keep = max(map(len, self.stops), default=1) - 1
        """What a stop that began earlier may still need of what was said."""
        self._tail = ""
        self.met = False

    def add(self, segment: str) -> None:
        if not self.stops or self.met:
            return
        text = self._tail + segment  # never the whole answer: a token is O(stop), not O(reply)
        self.met = any(s in text for s in self.stops)
        self._tail = text[-self._keep:] if self._keep else ""


class PromptScores:
    """The prompt's tokens' log-probabilities, gathered from the logits of
    each prefilled chunk (the last position's come with the next chunk)."""

    CHUNK = 128
    """Prefill chunk while scoring: its logits are (chunk, vocabulary) floats."""

    def __init__(self, tokens: Sequence[int], top: int):
        self.tokens, self.top = list(tokens), top
        self.entries: list[TokenLogprob | None] = [None] if tokens else []

    def add(self, logits: mx.array, start: int) -> None:
        """``logits`` at the prompt's positions from ``start`` on: the figures
        of the tokens that follow each."""
        following = self.tokens[start + 1:start + 1 + logits.shape[0]]
        if not following:
            return
        rows = logits[:len(following)].astype(mx.float32)
        rows = rows - mx.logsumexp(rows, axis=-1, keepdims=True)
        ids = mx.array(following, dtype=mx.int32)[:, None]
        picked = mx.take_along_axis(rows, ids, axis=-1)[:, 0]
        best = mx.argpartition(-rows, kth=self.top - 1, axis=-1)[:, :self.top] \
            if self.top else mx.zeros((len(following), 0), dtype=mx.int32)
        values = mx.take_along_axis(rows, best, axis=-1)
        mx.eval(picked, best, values)
        for token, lp, alt, alt_lp in zip(following, picked.tolist(), best.tolist(),
                                          values.tolist()):
            ranked = sorted(zip(alt, alt_lp), key=lambda p: -p[1])
            self.entries.append(TokenLogprob(token, lp, tuple(ranked)))
