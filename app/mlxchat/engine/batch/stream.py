"""A member's reply stream: the tail fed and the first token sampled alone
(under the member's own hold of the compute lock, as mlx-lm's
``generate_step`` does it), then the batch's tokens, and on close its cache
extracted back into the live cache, holding every token it handed out (what
an unbatched turn's cache holds)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, Callable, Sequence

import mlx.core as mx

from mlxchat.engine.batch.decoder import BatchDecoder
from mlxchat.engine.batch.member import Member
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.results import SpeculationFigures
from mlxchat.engine.speculative.streams import Stream

PREFILL_STEP = 2048
"""mlx-lm's ``prefill_step_size``: a long tail is fed in pieces this long."""


def first_token(model: Any, layers: list[Any], tail: Sequence[int], *, sampler: Any,
                processors: Sequence[Any]) -> tuple[mx.array, mx.array | None]:
    """Feed ``tail`` and sample the token after it: ``generate_step``'s first
    step, and what the processors have seen (None without processors)."""
    prompt, seen = mx.array(list(tail)), None
    while len(prompt) > 1:
        n = min(PREFILL_STEP, len(prompt) - 1)
        model(prompt[:n][None], cache=layers)
        mx.eval([c.state for c in layers])
        seen = prompt[:n] if seen is None else mx.concatenate([seen, prompt[:n]])
        prompt = prompt[n:]
    logits = model(prompt[None], cache=layers)[:, -1, :]
    if processors:
        seen = prompt if seen is None else mx.concatenate([seen, prompt])
        for processor in processors:
            logits = processor(seen, logits)
    token = sampler(logits - mx.logsumexp(logits, keepdims=True))
    mx.eval(token, [c.state for c in layers])
    return token, (seen if processors else None)


def batched_stream(batch: BatchDecoder, live: LiveCache, tail: Sequence[int], *,
                   budget: int, sampler: Any, processors: Sequence[Any],
                   count: SpeculationFigures,
                   lend: Callable[[], AbstractContextManager[Any]],
                   hold: Callable[[], AbstractContextManager[Any]] = nullcontext) -> Stream:
    """Up to ``budget`` tokens after ``tail``, decoded in ``batch``; ``lend()``
    steps the member's engine out of the compute lock's line meanwhile;
    ``hold()`` takes the lock for the first token (a thread that does not
    hold it already: another choice's)."""
    count.mode = "off"
    with hold():
        token, seen = first_token(batch.model, live.layers, tail, sampler=sampler,
                                  processors=processors)
    member = Member(live.layers, token, seen, sampler=sampler, processors=processors)
    with lend():
        batch.join(member)
        try:
            for _ in range(budget):
                fed = member.next_token(batch.ask)
                count.passes += 1
                yield fed, False
        finally:
            own = batch.leave(member)
            if own is not None:
                live.layers = own
