"""A turn's prefill (in cancellable chunks) and decode, on the engine thread,
and its events handed to the caller's thread.

The engine decides what the turn computes (the model, the fitted prompt, the
settings); ``TurnPipeline`` reuses the longest cached prefix, prefills the
rest in chunks sized to about ``chunk_seconds`` each, decodes the reply and
returns the turn's end for the engine to say. ``events`` is the caller's side:
the turn's events as they come, the turn cancelled when the caller stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import random
import threading
import time
from typing import Any, Callable, Iterator, Sequence

import mlx.core as mx

from mlxchat import blas
from mlxchat.chat import Message
from mlxchat.engine.batch import caches as batching
from mlxchat.engine.batch.choices import ChoiceCache, OtherChoices
from mlxchat.engine.batch.decoder import BatchDecoder
from mlxchat.engine.batch.stream import batched_stream
from mlxchat.engine.disk.prefix import PrefixMarks
from mlxchat.engine.events import EngineError, Event, PrefillProgress, PromptLogprobs, TurnDone
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.engine.results import Cancelled, Decode, Prefill, turn_stats
from mlxchat.engine.speculative.drafting import Drafting
from mlxchat.engine.speculative.streams import Stream
from mlxchat.engine.thread.compute import WaitCancelled
from mlxchat.engine.thread.worker import EngineThread
from mlxchat.engine.turn.constrained import CompiledFormat
from mlxchat.engine.turn.decode import Reply, decode, seeded_sampler
from mlxchat.engine.turn.prefill_cost import PrefillChunks
from mlxchat.engine.turn.progress import LiveFigures
from mlxchat.engine.turn.ranks import Ranks
from mlxchat.engine.turn.reply_options import PromptScores, ReplyOptions
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel

_DONE = object()
ABANDONED = object()
"""Ends a turn whose engine thread will never finish it (``Ranks.next_event``)."""


def events(worker: EngineThread, job: Callable[[Callable[[Event], None]], None],
           next_event: Callable[[queue.Queue], Any]) -> Iterator[Event]:
    """Run ``job(emit)`` on the engine thread; yield what it emits. A refusal
    or failure is raised here; closing the iterator early cancels the job."""
    box: queue.Queue = queue.Queue()
    cancel = threading.Event()
    fut = worker.submit(lambda: job(box.put), cancel)
    fut.add_done_callback(lambda _: box.put(_DONE))
    item = None
    try:
        while True:
            item = next_event(box)
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


def _tail(live: LiveCache, tokens: Sequence[int], settings: GenerationSettings,
          options: ReplyOptions) -> tuple[int, PromptScores | None]:
    """The prompt's last tokens fed by the first decode step, and what gathers
    the prompt's log-probabilities when they are asked for (then every
    position is computed: the cache starts cold)."""
    if options.prompt_logprobs:
        live.reset("the prompt's log-probabilities were asked for")
        return 1, PromptScores(tokens, options.logprobs or 0)
    # generate_step gets the tail: its logits processors (repetition penalty)
    # then see the same recent context whatever was reused.
    return (1 if settings.repetition_penalty == 1.0 else min(20, len(tokens))), None


def prefill_setup(loaded: LoadedModel, kv_bits: int | None) -> tuple:
    """What a prefill's speed depends on besides its tokens and position."""
    return loaded.info.fingerprint, loaded.info.compute_dtype, kv_bits


class TurnPipeline:
    """Prefill and decode for the engine's turns; owns the prefill chunk size,
    which it learns from each full chunk's time."""

    def __init__(self, *, worker: EngineThread, drafting: Drafting, marks: PrefixMarks,
                 ranks: Ranks, chunk_seconds: float):
        self._worker, self._drafting, self._marks, self._ranks = worker, drafting, marks, ranks
        self.chunk_seconds = chunk_seconds
        self._chunk = 64
        self.chunks = PrefillChunks()
        """Each chunk's tokens, start and seconds, for the prefill estimates."""
        self.batch: BatchDecoder | None = None
        """Where replies decode together with other engines' (None: alone)."""

    def prefill(self, loaded: LoadedModel, live: LiveCache, tokens: Sequence[int],
                emit: LiveFigures, *, between: Callable[[], None] = lambda: None,
                cap: int | None = None, scores: PromptScores | None = None) -> Prefill:
        """Feed ``tokens`` in chunks sized to ~chunk_seconds (at most ``cap``);
        progress counts them against every token the turn computes (the tail
        too). ``between`` runs before each chunk after the first; ``scores``
        gathers the prompt's log-probabilities from each chunk's logits."""
        if scores is not None:
            cap = min(cap or scores.CHUNK, scores.CHUNK)
        total, done, start = len(tokens), 0, time.perf_counter()
        emit(PrefillProgress(0, emit.total))
        while done < total:
            if done:
                between()
            if self._worker.cancelled():
                raise Cancelled
            n = self._marks.chunk(min(self._chunk, cap or total, total - done),
                                  held=len(live.tokens))
            held, t0 = len(live.tokens), time.perf_counter()
            if scores is None:
                live.feed(loaded.model, tokens[done:done + n])
            else:  # one process only: a split model refuses the figures
                scores.add(live.feed(loaded.model, tokens[done:done + n], logits=True), held)
            dt = time.perf_counter() - t0
            self.chunks.record(prefill_setup(loaded, live.bits), n, held, dt)
            self._marks.reached(live, loaded.info)
            done += n
            if n == self._chunk:
                self._chunk = max(16, min(2048, int(n * self.chunk_seconds / max(dt, 1e-4))))
            elapsed = time.perf_counter() - start
            emit(PrefillProgress(done, emit.total, done / max(elapsed, 1e-9)))
        if scores is not None:
            emit(PromptLogprobs(tuple(scores.entries)))
        return Prefill(tokens=total, seconds=time.perf_counter() - start)

    def run(self, loaded: LoadedModel, live: LiveCache, fitted: FittedPrompt,
            messages: Sequence[Message], settings: GenerationSettings, *, window: int,
            started: float, emit: Callable[[Event], None], busy: Callable[[], None],
            compute: str = "", output: CompiledFormat | None = None,
            options: ReplyOptions = ReplyOptions(),
            spec_off: str | None = None) -> tuple[TurnDone, LiveFigures]:
        """Reuse, prefill, decode: the turn's end (not said yet) and the figures
        that say it. ``busy()`` once the cache was trimmed to what is reused;
        ``compute``: how quantized layers multiply this turn, for its stats;
        ``output``: the schema the reply follows; ``options``: the request's
        biases, penalties, log-probabilities and choices; ``spec_off``: why
        speculation was turned off for it."""
        info, tokens = loaded.info, fitted.tokens
        if options.choices > 1:
            self._can_choose(loaded, live, settings)
        mx.reset_peak_memory()
        tail, scores = _tail(live, tokens, settings, options)
        reuse = live.reuse(fitted, messages, tail=tail, kv_bits=settings.kv_bits,
                           head_dim=info.head_dim)
        typed = live.typed_ahead(reuse.tokens)
        batched = self._batched(loaded, live)
        if batched:
            spec_off = spec_off or batching.SPEC_OFF
        if settings.seed is not None:
            mx.random.seed(settings.seed)
        busy()
        prefill, decoded, drafted = Prefill(), Decode(), (0, False)
        figures = LiveFigures(live, len(tokens) - reuse.tokens, emit)
        try:
            # Batched: the batch's next step goes between chunks (the others' tokens keep coming).
            prefill = self.prefill(loaded, live, tokens[reuse.tokens:len(tokens) - tail], figures,
                                   scores=scores,
                                   **(dict(between=lambda: self._worker.pass_on(cancellable=False),
                                           cap=batching.CHUNK_TOKENS) if batched else {}))
            drafted = self._drafting.follow(tokens[:len(tokens) - tail], settings,
                                            cancelled=self._worker.cancelled)
            decoded = self._decode(loaded, live, tokens, tail,
                                   Reply(settings, window, started, tokens, output, options),
                                   figures, batched=batched, said=emit)
        except Cancelled:
            decoded.finish_reason = "cancelled"
        finally:
            live.settle(fitted.messages)
        live.conversation.append(("assistant", decoded.reply))
        live.source = "warm"
        stats = turn_stats(
            len(tokens), reuse, prefill, decoded, typed=typed, drafted=drafted,
            dropped=fitted.dropped, window=window, kv_bits=settings.kv_bits,
            weights_bytes=info.weights_bytes, total_s=time.perf_counter() - started,
            context_used=len(live.tokens), kv_bytes=live.nbytes,
            peak_memory_bytes=mx.get_peak_memory(), model=info.name,
            model_quantization=info.quantization, blas=blas.status().words(),
            cpu_matmul=compute, spec_off_reason=spec_off)
        done = TurnDone(reply=decoded.reply, stats=stats, dropped_messages=fitted.dropped,
                        token_ids=decoded.token_ids, reasoning=decoded.reasoning)
        return done, figures

    def _can_choose(self, loaded: LoadedModel, live: LiveCache,
                    settings: GenerationSettings) -> None:
        """Several choices decode as batch members: EngineError when this
        turn's cache cannot join a batch."""
        why = ("the model is split across machines" if self._ranks.segments_per_rank
               else "its KV cache is quantized" if settings.kv_bits
               else batching.refusal(loaded.model, live.layers))
        if why:
            raise EngineError(f"several choices are sampled together in a batch, which "
                              f"this turn cannot join: {why}")

    def _batched(self, loaded: LoadedModel, live: LiveCache) -> bool:
        """This turn's reply decodes in the batch."""
        return (self.batch is not None and self.batch.model is loaded.model
                and not self._ranks.segments_per_rank
                and batching.refusal(loaded.model, live.layers) is None)

    def _decode(self, loaded: LoadedModel, live: LiveCache, tokens: list[int], tail: int,
                reply: Reply, emit: Callable[[Event], None], *, batched: bool = False,
                said: Callable[[Event], None] = lambda _: None) -> Decode:
        """Feed the prompt's last ``tail`` tokens and sample the reply (and the
        turn's other choices, said through ``said``)."""
        settings = reply.settings
        choices = reply.options.choices
        batch = self.batch if batched else None
        if choices > 1 and batch is None:  # a batch of this turn's own
            batch = BatchDecoder(loaded.model, size=choices, compute=self._worker.compute)
        try:
            if choices == 1:
                return self._decode_one(loaded, live, tokens, tail, reply, emit, batch)
            others = OtherChoices(choices, layers=live.layers, tokens=live.tokens, emit=said)
            others.start(self._other_choice(loaded, tokens[len(tokens) - tail:], reply, batch))
            try:
                return self._decode_one(loaded, live, tokens, tail, reply, emit, batch)
            finally:
                with self._worker.lent():  # their first tokens need the lock
                    others.join()
        finally:
            if batch is not None and batch is not self.batch:
                batch.close()

    def _other_choice(self, loaded: LoadedModel, tail: list[int], reply: Reply,
                      batch: BatchDecoder) -> Callable[[ChoiceCache, int, Callable], Decode]:
        """How choice ``i`` decodes on its thread: a seed of its own, the
        compute lock taken for what it computes alone."""
        seed = reply.settings.seed if reply.settings.seed is not None \
            else random.getrandbits(31)
        compute, owner = self._worker.compute, self._worker.owner

        def run(cache: ChoiceCache, i: int, emit: Callable[[Event], None]) -> Decode:
            own = dataclasses.replace(reply, sampler=seeded_sampler(reply.settings, seed + i))

            def open_stream(*, tail: list[int], history: list[int], **kw: Any) -> Stream:
                return batched_stream(batch, cache, tail, lend=contextlib.nullcontext,
                                      hold=lambda: compute.held(f"{owner}-choice-{i}"), **kw)
            return decode(loaded.tokenizer, cache, list(tail), own, emit=emit,
                          cancelled=self._worker.cancelled, open_stream=open_stream)
        return run

    def _decode_one(self, loaded: LoadedModel, live: LiveCache, tokens: list[int], tail: int,
                    reply: Reply, emit: Callable[[Event], None],
                    batch: BatchDecoder | None) -> Decode:
        """The turn's own reply, in ``batch`` when given."""
        settings = reply.settings

        def open_stream(*, tail: list[int], history: list[int], **kw: Any) -> Stream:
            if batch is not None:
                return batched_stream(batch, live, tail, lend=self._worker.lent, **kw)
            if len(history) > len(reply.prompt_tokens):
                # After a reasoning budget's close the draft catches up first: a
                # token or two, not cancelled (the turn already followed the prompt).
                self._drafting.follow(live.tokens, settings, cancelled=lambda: False)
            return self._drafting.stream(loaded, live, tail, settings, prompt_tokens=history,
                                         **kw)
        return decode(loaded.tokenizer, live, tokens[len(tokens) - tail:], reply, emit=emit,
                      cancelled=self._worker.cancelled,
                      open_stream=self._ranks.opener(loaded, live, settings, open_stream))
