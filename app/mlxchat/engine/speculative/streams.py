"""Speculative decoding with a draft model: mlx-lm's ``speculative_generate_step``
driving the target's live cache and a draft cache kept in step with it.

Both caches must be trimmable: rejected proposals are trimmed off, and a
sliding-window cache that has wrapped cannot give tokens back (mlx-lm then
silently corrupts the output). Used only on the engine thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import mlx.core as mx
from mlx_lm.generate import generate_step, speculative_generate_step
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.engine.kv import layers, prompt_cache
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.results import Cancelled, SpeculationFigures
from mlxchat.models import LoadedModel

Stream = Iterator[tuple[int, bool]]
"""Sampled tokens, each with whether a proposal (draft or lookup) supplied it."""


def untrimmable(model: Any) -> list[str]:
    """Cache classes of ``model`` that cannot give tokens back at any length
    (sliding windows once wrapped, recurrent states)."""
    return sorted({type(c).__name__ for c in make_prompt_cache(model)
                   if not layers.row(c).trims_anywhere(c)})


def trim_problem(loaded: LoadedModel, role: str) -> str | None:
    """Why ``loaded`` cannot take part in speculation, or None."""
    bad = untrimmable(loaded.model)
    if not bad:
        return None
    return (f"{role} {loaded.info.name} uses caches that cannot be trimmed "
            f"({', '.join(bad)}: sliding windows or recurrent state), so rejected "
            "proposals could not be taken back")


def vocab_problem(target: LoadedModel, draft: LoadedModel) -> str | None:
    """Why ``draft``'s tokens would not mean the same to ``target``, or None."""
    a, b = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    name, own = draft.info.name, target.info.name
    if len(a) != len(b):
        return (f"the draft {name} has a vocabulary of {len(b):,} tokens and {own} one of "
                f"{len(a):,}: a draft must share the model's tokenizer")
    differ = sum(1 for tok, i in a.items() if b.get(tok) != i)
    if differ:
        return (f"the draft {name} numbers {differ:,} of its {len(a):,} tokens differently "
                f"from {own}: a draft must share the model's tokenizer")
    return None


class Draft:
    """A draft model and its own live cache, which follows the target's prompt."""

    def __init__(self, loaded: LoadedModel, spec: str):
        self.loaded, self.spec = loaded, spec
        self.live = LiveCache(loaded.model)

    def follow(self, tokens: Sequence[int], *, kv_bits: int | None,
               cancelled: Callable[[], bool], chunk: int = 256) -> tuple[int, bool]:
        """Make the draft cache hold exactly ``tokens``: keep the longest shared
        prefix, trim the rest, prefill what is missing (cancellable). Returns the
        tokens prefilled and whether the cache was rebuilt from nothing."""
        head_dim = self.loaded.info.head_dim
        # A draft whose heads cannot be quantized keeps full precision.
        self.live.match_bits(kv_bits if head_dim and head_dim % 32 == 0 else None, head_dim)
        kept = self.live.keep_prefix(tokens)
        todo = list(tokens[kept:])
        for start in range(0, len(todo), chunk):
            if cancelled():
                raise Cancelled
            self.live.feed(self.loaded.model, todo[start:start + chunk])
        return len(todo), kept == 0 and len(todo) > 0


@dataclass
class Rounds:
    """Counts rounds from the stream of (token, from_draft): a round ends with
    the target's own token, so the next token opens a new verifying pass."""

    count: SpeculationFigures
    k: int
    budget: int
    generated: int = 0
    _open: bool = field(default=False)

    def see(self, from_draft: bool) -> None:
        if not self._open:
            self.count.passes += 1
            self.count.proposed += min(self.k, self.budget - self.generated)
            self._open = True
        self.generated += 1
        self.count.accepted += from_draft
        if not from_draft:
            self._open = False


def draft_stream(model: Any, live: LiveCache, draft: Draft, tail: Sequence[int], *,
                 k: int, budget: int, sampler: Any, processors: Any,
                 count: SpeculationFigures) -> Stream:
    """Tokens from mlx-lm's speculative loop. When closed early, mlx-lm trims
    both caches back to tokens it yielded; the draft's token list then follows
    its cache (it may lag the target's by the last accepted proposal)."""
    gen = speculative_generate_step(
        mx.array(tail), model, draft.loaded.model, num_draft_tokens=k, max_tokens=budget,
        sampler=sampler, logits_processors=processors,
        prompt_cache=live.layers + draft.live.layers)
    rounds = Rounds(count, k, budget)
    shown: list[int] = []
    try:
        for token, _, from_draft in gen:
            rounds.see(bool(from_draft))
            shown.append(int(token))
            yield int(token), bool(from_draft)
    finally:
        gen.close()
        mx.eval([c.state for c in live.layers])
        if shown and live.tokens[-1:] == shown[-1:] \
                and prompt_cache.offset(live.layers) == len(live.tokens) - 1:
            # As plain decoding leaves it (mlx-lm feeds each token as it yields
            # it): the cache holds every token the reply showed.
            model(mx.array(shown[-1:])[None], cache=live.layers)
        mx.eval([c.state for c in draft.live.layers])
        held = prompt_cache.offset(draft.live.layers)
        # The draft holds a prefix of what the target was fed and sampled.
        draft.live.tokens = list(live.tokens[:held])


def plain_stream(model: Any, live: LiveCache, tail: Sequence[int], *, budget: int,
                 sampler: Any, processors: Any, count: SpeculationFigures) -> Stream:
    """mlx-lm's one-token-per-pass loop, in the same shape as the others."""
    gen = generate_step(mx.array(tail), model, prompt_cache=live.layers, max_tokens=budget,
                        sampler=sampler, logits_processors=processors)
    try:
        for token, _ in gen:
            count.passes += 1
            yield int(token), False
    finally:
        gen.close()

