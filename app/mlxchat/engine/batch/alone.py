"""A batch of one: a member's reply decoded on its own thread, as plain
decoding does it, while nobody else computes (``batched_stream``'s first
part). mlx-lm's loop: the step that feeds a token and samples the next is
queued before the token is handed out, so the model computes while the
caller reads it; no hand-over to the batch's thread and back each token.
Once someone else wants to compute, the member joins the batch with the
token sampled but not fed (``pending``), as a member that joined at once."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import mlx.core as mx


class Alone:
    """The member's decode before it joins: its own layers, its pending token
    and what its logits processors have seen."""

    def __init__(self, model: Any, layers: list[Any], pending: mx.array,
                 seen: mx.array | None, *, sampler: Callable[[mx.array], mx.array],
                 processors: Sequence[Callable[[mx.array, mx.array], mx.array]]):
        self.model, self.layers = model, layers
        self.pending, self.seen = pending, seen
        self.sampler, self.processors = sampler, list(processors)

    def _next(self, token: mx.array) -> mx.array:
        """Feed ``token`` and sample the one after it (lazily): the batch's
        step for one row."""
        fed = token.reshape(1)
        logits = self.model(fed[None], cache=self.layers)[:, -1, :]
        if self.processors:
            self.seen = fed if self.seen is None else mx.concatenate([self.seen, fed])
            for processor in self.processors:
                logits = processor(self.seen, logits)
        return self.sampler(logits - mx.logsumexp(logits, keepdims=True))

    def tokens(self, budget: int, alone: Callable[[], bool]) -> Iterator[int]:
        """Up to ``budget`` tokens, each in the cache when handed out, while
        ``alone()``; ``pending`` is then the token sampled but not fed."""
        for _ in range(budget):
            if not alone():
                return
            upcoming = self._next(self.pending)
            mx.async_eval(upcoming)
            fed = int(self.pending.item())
            self.pending = upcoming
            yield fed

    def settled(self) -> None:
        """Everything it queued computed on this thread (the batch's thread
        cannot compute an array left lazy on another thread's stream)."""
        mx.eval(self.pending, *([self.seen] if self.seen is not None else []),
                [c.state for c in self.layers])
