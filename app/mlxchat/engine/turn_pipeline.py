"""The turn pipeline of ``ChatEngine``: a turn's events, prefill in chunks, decode.

A turn renders the whole conversation, reuses the longest cached prefix,
prefills the rest in cancellable chunks and streams the reply as events. It runs
on the engine's own thread (MLX streams are per thread).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterator, Sequence

import mlx.core as mx

from mlxchat import blas
from mlxchat.chat import GenerationSettings, Message
from mlxchat.engine import prompt
from mlxchat.engine.compute import WaitCancelled
from mlxchat.engine.cpu_choice import CpuMatmul
from mlxchat.engine.decode import Reply, decode
from mlxchat.engine.drafting import Drafting
from mlxchat.engine.events import EngineError, Event, PrefillProgress, TurnDone
from mlxchat.engine.live import LiveCache
from mlxchat.engine.prefix import PrefixMarks
from mlxchat.engine.progress import LiveFigures
from mlxchat.engine.results import Cancelled, Decode, Prefill, turn_stats
from mlxchat.engine.speculative import Stream
from mlxchat.engine.worker import EngineThread
from mlxchat.models.info import LoadedModel

_DONE = object()
ABANDONED = object()
"""Ends a turn whose engine thread will never finish it (``_next_event``)."""


class TurnPipeline:
    """``ChatEngine``'s turn: ``turn()`` on the caller's side, ``_turn`` and its
    prefill and decode on the engine thread. The state and the hooks it uses
    (``fit``, ``window``, ``speculation_problem``, ``_match_compute``,
    ``_refresh_state``, ``_after_turn``) are the engine's; a distributed engine
    overrides ``_next_event``, ``_turn`` and ``_decode``."""

    chunk_seconds: float
    _loaded: LoadedModel
    _live: LiveCache
    _chunk: int
    _window: int
    _drafting: Drafting
    cpu_matmul: CpuMatmul
    _marks: PrefixMarks
    _worker: EngineThread

    def turn(self, conversation: Sequence[Message] | prompt.FittedPrompt,
             settings: GenerationSettings) -> Iterator[Event]:
        """Run one turn; yields PrefillProgress, TextDelta and finally TurnDone.

        ``conversation`` is either messages to render whole through the template,
        or the prompt's tokens already laid out (a conversation's token ledger).
        Raises EngineError (ContextOverflowError) before any event when refused.
        Closing the iterator early cancels the turn.
        """
        self.supersede_typing()  # a send takes precedence over typing prefill
        events: queue.Queue = queue.Queue()
        cancel = threading.Event()
        planned = (conversation if isinstance(conversation, prompt.FittedPrompt)
                   else list(conversation))
        fut = self._worker.submit(lambda: self._turn(planned, settings, events.put), cancel)
        fut.add_done_callback(lambda _: events.put(_DONE))
        item = None
        try:
            while True:
                item = self._next_event(events)
                if item is _DONE:
                    if isinstance(fut.exception(), WaitCancelled):
                        return  # stopped while another engine computed: nothing ran
                    fut.result()  # re-raise a refusal or failure here
                    return
                if item is ABANDONED:
                    return  # the engine thread is stuck for good (a lost rank)
                yield item
        finally:
            if not fut.done() and item is not ABANDONED:
                cancel.set()
                fut.exception()

    def _next_event(self, events: queue.Queue) -> Any:
        """The turn's next event (a distributed engine also watches its ranks)."""
        return events.get()
    def _typing_feed(self, tokens: Sequence[int], emit: LiveFigures) -> Prefill:
        """Typing prefill lets a waiting engine (an API request) in between chunks."""
        return self._prefill(tokens, emit, between=self._worker.pass_on)

    def _prefill(self, tokens: Sequence[int], emit: LiveFigures, *,
                 between: Callable[[], None] = lambda: None) -> Prefill:
        """Feed ``tokens`` in chunks sized to ~chunk_seconds; progress counts
        them against every token the turn computes (the tail too). ``between``
        runs before each chunk after the first."""
        model, live = self._loaded.model, self._live
        total, done, start = len(tokens), 0, time.perf_counter()
        emit(PrefillProgress(0, emit.total))
        while done < total:
            if done:
                between()
            if self._worker.cancelled():
                raise Cancelled
            n = self._marks.chunk(min(self._chunk, total - done), held=len(live.tokens))
            t0 = time.perf_counter()
            live.feed(model, tokens[done:done + n])
            dt = time.perf_counter() - t0
            self._marks.reached(live, self._loaded.info)
            done += n
            if n == self._chunk:
                self._chunk = max(16, min(2048, int(n * self.chunk_seconds / max(dt, 1e-4))))
            elapsed = time.perf_counter() - start
            emit(PrefillProgress(done, emit.total, done / max(elapsed, 1e-9)))
        return Prefill(tokens=total, seconds=time.perf_counter() - start)

    def _turn(self, planned: list[Message] | prompt.FittedPrompt,
              settings: GenerationSettings, emit: Callable[[Event], None]) -> None:
        self._match_compute(settings.compute_dtype)
        plan = self.cpu_matmul.match(self._loaded, settings.cpu_matmul)
        info, live = self._loaded.info, self._live
        start = time.perf_counter()
        if isinstance(planned, prompt.FittedPrompt):
            fitted, messages = planned, planned.messages
        else:
            fitted, messages = self.fit(planned, settings), planned
        tokens = fitted.tokens
        problem = self.speculation_problem(settings.speculative)
        if problem:
            raise EngineError(f"speculative {settings.speculative}: {problem}")
        mx.reset_peak_memory()
        # generate_step gets the tail: its logits processors (repetition
        # penalty) then see the same recent context whatever was reused.
        tail = 1 if settings.repetition_penalty == 1.0 else min(20, len(tokens))
        reuse = live.reuse(fitted, messages, tail=tail, kv_bits=settings.kv_bits,
                           head_dim=info.head_dim)
        typed = live.typed_ahead(reuse.tokens)
        if settings.seed is not None:
            mx.random.seed(settings.seed)
        self._window = self.window(settings)
        self._refresh_state(busy=True)
        prefill, decoded, drafted = Prefill(), Decode(), (0, False)
        figures = LiveFigures(live, len(tokens) - reuse.tokens, emit)
        try:
            prefill = self._prefill(tokens[reuse.tokens:len(tokens) - tail], figures)
            drafted = self._drafting.follow(tokens[:len(tokens) - tail], settings,
                                            cancelled=self._worker.cancelled)
            decoded = self._decode(tokens, tail, Reply(settings, self._window, start, tokens),
                                   figures)
        except Cancelled:
            decoded.finish_reason = "cancelled"
        finally:
            live.settle(fitted.messages)
        live.conversation.append(("assistant", decoded.reply))
        live.source = "warm"
        stats = turn_stats(
            len(tokens), reuse, prefill, decoded, typed=typed, drafted=drafted,
            dropped=fitted.dropped, window=self._window, kv_bits=settings.kv_bits,
            weights_bytes=info.weights_bytes, total_s=time.perf_counter() - start,
            context_used=len(live.tokens), kv_bytes=live.nbytes,
            peak_memory_bytes=mx.get_peak_memory(), blas=blas.status().words(),
            cpu_matmul=plan.words())
        self._after_turn()
        self._refresh_state(stats)
        measure = self._drafting.measurement(self._loaded, settings, decoded.generated,
                                             decoded.decode_tps)
        if measure is not None:  # speculative=auto: a verifying pass timed after this turn
            self._worker.later(lambda: measure(self._loaded, self._live))
        figures.done(TurnDone(reply=decoded.reply, stats=stats, dropped_messages=fitted.dropped,
                              token_ids=decoded.token_ids, reasoning=decoded.reasoning))

    def _decode(self, tokens: list[int], tail: int, reply: Reply,
                emit: Callable[[Event], None]) -> Decode:
        """Feed the prompt's last ``tail`` tokens and sample the reply."""
        loaded, live, settings = self._loaded, self._live, reply.settings
        cancelled = self._worker.cancelled

        def open_stream(*, tail: list[int], history: list[int], **kw: Any) -> Stream:
            if len(history) > len(reply.prompt_tokens):
                # After a reasoning budget's close the draft catches up first: a
                # token or two, not cancelled (the turn already followed the prompt).
                self._drafting.follow(live.tokens, settings, cancelled=lambda: False)
            return self._drafting.stream(loaded, live, tail, settings, prompt_tokens=history,
                                         **kw)
        return decode(loaded.tokenizer, live, tokens[len(tokens) - tail:], reply, emit=emit,
                      cancelled=cancelled, open_stream=open_stream)
