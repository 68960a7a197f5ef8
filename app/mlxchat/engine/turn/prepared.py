"""A second KV cache the engine fills in idle time: the summary of a
conversation's oldest part written on it, then the compacted conversation
(system part, summary, the newest messages) prefilled into it, so that the
turn that finds the window full switches to it and prefills only its own
message (``session/compactor.py`` decides what goes in).

Every job runs on the engine thread, as typing prefill does: a turn
supersedes it within one chunk or token, and between chunks it gives way to
any other work queued on the engine (a typed prefill, a restore, a turn),
keeping what it computed; the next job goes on from there. The live cache is
never touched, until ``adopt`` makes this one the live one.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

import mlx.core as mx

from mlxchat.engine.events import EngineError
from mlxchat.engine.kv import prompt_cache
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.kv.reuse import common_prefix
from mlxchat.engine.results import Cancelled
from mlxchat.engine.thread.compute import WaitCancelled
from mlxchat.engine.thread.worker import Bookkeeping, EngineThread
from mlxchat.engine.turn.pipeline import TurnPipeline
from mlxchat.engine.turn.progress import LiveFigures
from mlxchat.models import LoadedModel

T = TypeVar("T")



@dataclass(frozen=True)
class Written:
    """What a summary job left: the tokens sampled so far (greedy), the end
    token included once ``done``."""

    ids: list[int]
    done: bool


class PreparedCache:
    """The second cache and the jobs that fill it, from any thread."""

    def __init__(self, *, worker: EngineThread, pipeline: TurnPipeline,
                 loaded: Callable[[], LoadedModel], live: Callable[[], LiveCache],
                 refusal: Callable[[], str | None],
                 adopted: Callable[[], None] = lambda: None):
        # ``adopted``: called on the engine thread once this cache is the live one
        # (the gauges' figures are read again).
        self._worker, self._pipeline, self._loaded, self._live = worker, pipeline, loaded, live
        self._refusal, self._adopted = refusal, adopted
        self._cache: LiveCache | None = None
        self._prompt: list[int] = []
        """The prompt whose answer is being written (the cache holds it first)."""
        self._written: list[int] = []
        self._cancel: threading.Event | None = None

    # -- any thread --------------------------------------------------------------------
    def write(self, prompt: Sequence[int], *, max_tokens: int,
              stops: Sequence[int]) -> Written:
        """Go on writing the greedy answer to ``prompt`` (at most ``max_tokens``,
        ending at one of ``stops``): what is written once this job ends,
        superseded or not. A prompt other than the last one starts over."""
        return self._run(lambda: self._write(list(prompt), max_tokens, set(stops)),
                         lambda: Written(list(self._written), False))

    def extend(self, tokens: Sequence[int]) -> int:
        """Go on prefilling ``tokens`` into the cache (whatever it holds past
        their common prefix is given back, or the cache starts over); the
        tokens it holds of them once this job ends."""
        wanted = list(tokens)
        return self._run(lambda: self._extend(wanted), lambda: common_prefix(
            self._cache.tokens if self._cache is not None else [], wanted))

    def held(self) -> list[int]:
        """The tokens the cache holds now."""
        return self._worker.call(Bookkeeping(
            lambda: [] if self._cache is None else list(self._cache.tokens)))

    def adopt(self, tokens: Sequence[int]) -> int:
        """Make this cache the live one when it holds more of ``tokens`` than the
        live cache does (it is trimmed to them first); the tokens the live
        cache holds of them after. This cache is empty afterwards either way."""
        wanted = list(tokens)
        return self._worker.call(lambda: self._adopt(wanted))

    def drop(self) -> None:
        """Forget the cache and what was written (a branch changed, a model switch)."""
        self.supersede()
        self._worker.call(Bookkeeping(self._forget))

    def supersede(self) -> None:
        """Stop a running or queued job within one chunk or token (its work is kept)."""
        cancel = self._cancel
        if cancel is not None:
            cancel.set()

    # -- the engine thread ----------------------------------------------------------------
    def _run(self, job: Callable[[], T], otherwise: Callable[[], T]) -> T:
        """``job()`` on the engine thread; ``otherwise()`` (what is held) when
        it was superseded while another engine computed and never ran."""
        problem = self._refusal()
        if problem:
            raise EngineError(problem)
        cancel = threading.Event()
        self._cancel = cancel
        fut: Future = self._worker.submit(job, cancel)
        try:
            return fut.result()
        except WaitCancelled:
            return self._worker.call(Bookkeeping(otherwise))
        finally:
            if self._cancel is cancel:
                self._cancel = None

    def _stopped(self) -> bool:
        return self._worker.cancelled() or self._worker.others_waiting()

    def _between(self) -> None:
        if self._stopped():
            raise Cancelled
        self._worker.pass_on()

    def _fresh(self) -> LiveCache:
        model = self._loaded().model
        if self._cache is None or self._cache.model is not model:
            self._cache = LiveCache(model)
            self._prompt, self._written = [], []
        return self._cache

    def _extend(self, tokens: list[int]) -> int:
        cache = self._fresh()
        shared = common_prefix(cache.tokens, tokens)
        if shared < len(cache.tokens):
            if prompt_cache.trimmable(cache.layers):
                cache.trim_to(shared)
            else:
                cache.reset()
            self._prompt, self._written = [], []
        held = len(cache.tokens)
        if held < len(tokens) and not self._stopped():
            try:
                fed = tokens[held:]
                self._pipeline.prefill(self._loaded(), cache, fed,
                                       LiveFigures(cache, len(fed), lambda _event: None),
                                       between=self._between)
            except Cancelled:
                pass
            finally:
                cache.settle_ahead()
        return common_prefix(cache.tokens, tokens)

    def _write(self, prompt: list[int], max_tokens: int, stops: set[int]) -> Written:
        cache = self._fresh()
        if prompt != self._prompt:
            self._written = []
        sequence = prompt + self._written
        if self._extend(sequence[:-1]) < len(sequence) - 1:
            return Written(list(self._written), False)  # given way before the prompt was in
        self._prompt = prompt
        model = self._loaded().model
        while (len(self._written) < max_tokens
               and not (self._written and self._written[-1] in stops)):
            if self._stopped():
                return Written(list(self._written), False)
            last = (prompt + self._written)[-1]
            logits = model(mx.array([last])[None], cache=cache.layers)
            token = int(mx.argmax(logits[0, -1]).item())
            cache.tokens.append(last)
            self._written.append(token)
        return Written(list(self._written), True)

    def _adopt(self, tokens: list[int]) -> int:
        live, cache = self._live(), self._cache
        ours = common_prefix(cache.tokens, tokens) if cache is not None else 0
        theirs = common_prefix(live.tokens, tokens)
        if cache is not None and ours > theirs:
            if ours < len(cache.tokens) and prompt_cache.trimmable(cache.layers):
                cache.trim_to(ours)
            if ours == len(cache.tokens):
                live.adopt(cache.layers, cache.tokens, (), "warm")
                theirs = ours
                self._adopted()
        self._forget()
        return theirs

    def _forget(self) -> None:
        self._cache, self._prompt, self._written = None, [], []
        mx.clear_cache()
