"""Prompt-lookup decoding: no draft model. The proposal is the tokens that
followed the last earlier occurrence of the most recent n-gram (of the prompt
and the reply so far); the model verifies them in one pass and the rejected
ones are trimmed off its cache. Used only on the engine thread."""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx
from mlx_lm.models.cache import trim_prompt_cache

from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.results import SpeculationFigures
from mlxchat.engine.speculative.streams import Stream

NGRAMS = (3, 2)
"""n-gram lengths tried, longest first. A single token recurs everywhere and
its proposals are mostly rejected: on the CPU build, where each proposed token
costs about a pass, adding 1-grams took free text from 0.79x to 0.66x of plain
decoding and gained nothing on copied text (SmolLM2-135M, 64 tokens)."""


class Proposer:
    """Proposals from ``history`` (the prompt, then each token as it is
    sampled): up to ``k`` tokens that followed the last earlier occurrence of
    the longest recent n-gram. An index of every n-gram's latest start makes a
    proposal cost the same at 100 tokens of history as at 100,000 (a scan
    took 0.7 ms a token at 16k, a sixth of a fast model's decode step)."""

    def __init__(self, history: Sequence[int], ngrams: Sequence[int] = NGRAMS):
        self.history: list[int] = []
        self.ngrams = tuple(ngrams)
        self._latest: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.ngrams}
        self.extend(history)

    def extend(self, tokens: Sequence[int]) -> None:
        history = self.history
        for token in tokens:
            end = len(history)  # the n-grams ending here are followed by ``token``
            for n in self.ngrams:
                if end >= n:
                    self._latest[n][tuple(history[end - n:end])] = end - n
            history.append(token)

    def propose(self, k: int) -> list[int]:
        history, size = self.history, len(self.history)
        for n in self.ngrams:
            if k <= 0 or size <= n:
                continue
            start = self._latest[n].get(tuple(history[size - n:]))
            if start is not None:
                return history[start + n:start + n + k]
        return []


def _sample(logits: mx.array, seen: list[int], drafts: list[int], sampler: Any,
            processors: Any) -> list[int]:
    """The model's token at each position, each from its own context: the
    processors see what the stream fed before it (``seen``: the tail, the
    tokens sampled since), as ``generate_step``'s do."""
    if processors:
        rows = []
        for i in range(logits.shape[0]):
            row = logits[i:i + 1]
            context = mx.array(seen + drafts[:i])
            for processor in processors:
                row = processor(context, row)
            rows.append(row)
        logits = mx.concatenate(rows)
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return sampler(logprobs).tolist()


def lookup_stream(model: Any, live: LiveCache, tail: Sequence[int], *, history: Sequence[int],
                  k: int, budget: int, sampler: Any, processors: Any,
                  count: SpeculationFigures) -> Stream:
    """Feed the tail with a proposal, keep the longest run the model agrees
    with, then its own next token. ``history`` is the whole prompt (tail
    included). Closed early, the cache gives back accepted tokens not yet yielded."""
    proposer, fed, made, unyielded = Proposer(history), list(tail), 0, 0
    seen = list(tail)
    pending = None  # the model's own token, yielded and not yet fed
    try:
        while made < budget:
            drafts = proposer.propose(min(k, budget - made - 1))
            pending = None  # fed now, with the proposal
            logits = model(mx.array(fed + drafts)[None], cache=live.layers)[0, -len(drafts) - 1:]
            tokens = _sample(logits, seen, drafts, sampler, processors)
            n = 0
            while n < len(drafts) and tokens[n] == drafts[n]:
                n += 1
            trim_prompt_cache(live.layers, len(drafts) - n)
            count.passes += 1
            count.proposed += len(drafts)
            count.accepted += n
            unyielded = n
            for token in drafts[:n]:
                unyielded -= 1
                made += 1
                yield token, True
            made += 1
            pending = tokens[n]
            yield tokens[n], False
            proposer.extend(drafts[:n] + [tokens[n]])
            fed = [tokens[n]]
            seen += drafts[:n] + fed
    finally:
        trim_prompt_cache(live.layers, unyielded)
        if pending is not None:
            # As plain decoding leaves it (mlx-lm feeds each token as it yields
            # it): the cache holds every token the reply showed.
            model(mx.array([pending])[None], cache=live.layers)
