"""One reply in the batch: its cache while it waits to join or has left, the
token sampled but not fed yet, its sampler and logits processors, and the
hand-over of tokens between the batch's thread and the member's."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Sequence

import mlx.core as mx

Sampler = Callable[[mx.array], mx.array]
Processor = Callable[[mx.array, mx.array], mx.array]


class BatchFailed(RuntimeError):
    """The batch's step failed (or the batch closed): every member ends."""


class Member:
    """A member's side of the batch. The batch's thread reads ``pending`` and
    writes ``deliver``; the member's thread calls ``next_token`` and ``leave``."""

    def __init__(self, layers: list[Any], pending: mx.array, tokens: mx.array | None, *,
                 sampler: Sampler, processors: Sequence[Processor], owner: str = ""):
        self.layers: list[Any] | None = layers
        """Its own cache: before it joins and after it left (None meanwhile)."""
        self.pending = pending
        """The token sampled last, fed by the next step (mlx-lm's pipelining:
        a token is handed out once it is in the cache)."""
        self.tokens = tokens
        """What its logits processors have seen (the tail and the reply)."""
        self.sampler, self.processors, self.owner = sampler, list(processors), owner
        self.wants = False
        """Waiting for its next token: the batch steps once every member is."""
        self.leaving = False
        self.steps = 0
        """Batch steps it took part in."""
        self._cond = threading.Condition()
        self._out: deque[Any] = deque()
        self._left = False

    # -- the batch's thread --------------------------------------------------------
    def deliver(self, item: int | BaseException) -> None:
        with self._cond:
            self.wants = False
            self._out.append(item)
            self._cond.notify_all()

    def gone(self, layers: list[Any] | None) -> None:
        """It is out of the batch; ``layers`` are its own again."""
        with self._cond:
            self.layers, self._left = layers, True
            self._cond.notify_all()

    # -- the member's thread -------------------------------------------------------
    def next_token(self, ask: Callable[["Member"], None]) -> int:
        """The next token (``ask`` tells the batch it is wanted)."""
        ask(self)
        with self._cond:
            while not self._out:
                self._cond.wait()
            item = self._out.popleft()
        if isinstance(item, BaseException):
            raise BatchFailed(str(item)) from item
        return item

    def wait_gone(self) -> list[Any] | None:
        with self._cond:
            while not self._left:
                self._cond.wait()
            return self.layers
