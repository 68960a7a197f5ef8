"""ChatEngine: one model, one live KV cache, one generation thread.

All MLX work runs on the engine's own thread (MLX streams are per thread).
The engine holds the model, the live cache and the gauges' state, and hands
each concern to a collaborator it owns: the thread (``EngineThread``), the
turn's prefill and decode (``TurnPipeline``), prompts (``PromptBuilder``, public
as ``prompts``), the cache on disk (``DiskCache``, or a split model's), the draft
model (``Drafting``), prefix marks (``PrefixMarks``), typing prefill
(``TypingPrefill``), and the ranks it computes on (``Ranks``: this process, or a
split over several, ``engine/distributed/split.py``).
"""

from __future__ import annotations

import atexit
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import mlx.core as mx

from mlxchat.chat import Message
from mlxchat.engine.batch.decoder import BatchDecoder
from mlxchat.engine.disk.prefix import PrefixMarks, PrefixSaved
from mlxchat.engine.disk.segments import SegmentInfo, SegmentRef
from mlxchat.engine.events import CacheLoad, EngineError, EngineState, Event, Preparing
from mlxchat.engine.kv.live import LiveCache, compute_once
from mlxchat.engine.kv.view import LiveView, view_of
from mlxchat.engine.prompt import images as prompt_images
from mlxchat.engine.prompt.builder import PromptBuilder
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.engine.prompt.jinja import SessionClock
from mlxchat.engine.prompt.render import render
from mlxchat.engine.speculative import auto
from mlxchat.engine.speculative.drafting import Drafting, MeasureVerify
from mlxchat.engine.speculative.streams import trim_problem
from mlxchat.engine.thread.compute import PROCESS_LOCK, ComputeLock
from mlxchat.engine.thread.worker import Bookkeeping, EngineThread
from mlxchat.engine.turn import reply_options
from mlxchat.engine.turn.constrained import CompiledFormat, read_grammar_tokenizer
from mlxchat.engine.turn.cpu_choice import CpuMatmul
from mlxchat.engine.turn.early_images import EarlyImages
from mlxchat.engine.turn.pipeline import TurnPipeline, events, prefill_setup
from mlxchat.engine.turn.gauges import gauge_state
from mlxchat.engine.turn.prefill_cost import CHUNK_SECONDS, PrefillChunk
from mlxchat.engine.turn.prepared import PreparedCache
from mlxchat.engine.turn.ranks import OneProcess, Ranks
from mlxchat.engine.turn.typing_prefill import TypingPrefill
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel, ModelInfo, precision
from mlxchat.models.info import recast, retyped
from mlxchat.turn_stats import TurnStats

_LIVE: "weakref.WeakSet[ChatEngine]" = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    for engine in list(_LIVE):
        engine.close()


class ChatEngine:
    """Drive one loaded model; every public method is safe from any thread.

    ``measure_verify`` times a verifying pass for ``speculative=auto``
    (``auto.measure``; tests fix it). ``compute_owner`` is whose this engine
    is in the compute lock's line ('chat', 'api'): engines over one model take
    turns under ``compute``. ``casts_weights=False``: another engine owns the
    shared weights' dtype; this one computes in whatever they hold (the API
    beside the chat). Prefill chunks aim at ``chunk_seconds`` each, so a
    cancel lands quickly."""

    def __init__(self, loaded: LoadedModel, *, ranks: Ranks | None = None,
                 chunk_seconds: float = CHUNK_SECONDS, measure_verify: MeasureVerify = auto.measure,
                 compute_owner: str = "chat", compute: ComputeLock = PROCESS_LOCK,
                 casts_weights: bool = True):
        self.casts_weights = casts_weights
        self._loaded = loaded
        self._ranks: Ranks = ranks or OneProcess()
        self._live: LiveCache
        self._state = EngineState()
        self._drafting = Drafting(measure=measure_verify)
        self.cpu_matmul = CpuMatmul()
        """How quantized layers multiply on a CPU (measured per shape, per model)."""
        self._marks = PrefixMarks()
        self._worker = EngineThread(owner=compute_owner, compute=compute)
        self._pipeline = TurnPipeline(worker=self._worker, drafting=self._drafting,
                                      marks=self._marks, ranks=self._ranks,
                                      chunk_seconds=chunk_seconds)
        self._typing = TypingPrefill(
            submit=self._worker.submit, alive=self._worker.alive, refresh=self._refresh_state,
            feed=lambda tokens, emit: self._pipeline.prefill(
                self._loaded, self._live, tokens, emit, between=self._worker.pass_on))
        self.prompts = PromptBuilder(lambda: self._loaded)
        """Renders, deltas and the window for the model held now (no MLX)."""
        self.prepared = PreparedCache(worker=self._worker, pipeline=self._pipeline,
                                      loaded=lambda: self._loaded, live=lambda: self._live,
                                      refusal=lambda: self._ranks.refusal("compaction"),
                                      adopted=self._refresh_state)
        """A second cache filled in idle time: a compacted conversation, its summary."""
        # The tower run for images as they are attached, before the turn.
        self.images = EarlyImages(later=self._worker.later, loaded=lambda: self._loaded,
                                  match=self._match_compute)
        _LIVE.add(self)
        self._call(self._start_cold)

    def close(self) -> None:
        """Cancel any turn and stop the thread; called at exit for live engines."""
        _LIVE.discard(self)
        if self._ranks.release(self._worker):
            self._worker.close()

    def _call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the engine thread, waited for."""
        self._ranks.check()
        return self._worker.call(fn)

    # -- what it holds ------------------------------------------------------------------
    @property
    def segments_per_rank(self) -> bool:
        """A split model: each rank keeps its own shard of every segment."""
        return self._ranks.segments_per_rank

    @property
    def loaded(self) -> LoadedModel:
        return self._loaded

    @property
    def info(self) -> ModelInfo:
        return self._loaded.info

    @property
    def cached_tokens(self) -> list[int]:
        return list(self._live.tokens)

    @property
    def compute(self) -> ComputeLock:
        """The lock this engine computes under (shared by the engines of a process)."""
        return self._worker.compute

    def state(self) -> EngineState:
        return self._state

    def live_view(self) -> LiveView:
        """A read-only picture of the live cache now (tokens, figures, layer copies)."""
        return self._call(lambda: view_of(self._live))

    def draft_view(self) -> LiveView | None:
        """The same of the draft model's cache (None without a draft)."""
        return self._call(lambda: None if (draft := self._drafting.draft) is None
                          else view_of(draft.live))

    # -- turns ---------------------------------------------------------------------------
    def turn(self, conversation: Sequence[Message] | FittedPrompt, settings: GenerationSettings,
             *, output: CompiledFormat | None = None,
             options: reply_options.ReplyOptions = reply_options.ASKS_NOTHING) -> Iterator[Event]:
        """Run one turn; yields PrefillProgress, TextDelta and finally TurnDone.
        ``conversation`` is either messages to render whole through the template,
        or the prompt's tokens already laid out (a conversation's token ledger).
        Raises EngineError (ContextOverflowError) before any event when refused;
        closing the iterator early cancels the turn. ``output``: the schema the
        reply follows; ``options``: the request's biases, penalties, log-probabilities
        and choices (speculation is off for either)."""
        self.supersede_typing()  # a send takes precedence over typing prefill
        planned = (conversation if isinstance(conversation, FittedPrompt)
                   else list(conversation))
        self._ranks.watch_turn(planned, settings, self._loaded, self.prompts.window(settings))
        return events(self._worker, lambda emit: self._turn(planned, settings, emit, output,
                                                            options), self._ranks.next_event)

    def _turn(self, planned: list[Message] | FittedPrompt, settings: GenerationSettings,
              emit: Callable[[Event], None], output: CompiledFormat | None = None,
              options: reply_options.ReplyOptions = reply_options.ASKS_NOTHING) -> None:
        start = time.perf_counter()
        settings = self._ranks.begin_turn(settings)
        settings, spec_off = reply_options.decoded_under(
            settings, output, options, loaded=self._loaded, split=self.segments_per_rank)
        self._match_compute(settings.compute_dtype)
        if (slow := self.cpu_matmul.pending(self._loaded, settings.cpu_matmul)) is not None:
            emit(Preparing(slow))  # seconds on a launch's first turn: say so
        plan = self.cpu_matmul.match(self._loaded, settings.cpu_matmul)
        # Sampling left to the model (None) is its own default, decided here once.
        settings = settings.sampled_with(self._loaded.info.sampling.values())
        if isinstance(planned, FittedPrompt):
            fitted, messages = planned, planned.messages
        else:
            fitted, messages = self.prompts.fit(planned, settings), planned
        prompt_images.know(self._loaded, fitted.messages)
        problem = self.speculation_problem(settings.speculative)
        if problem:
            raise EngineError(f"speculative {settings.speculative}: {problem}")
        self._window = self.prompts.window(settings)
        done, figures = self._pipeline.run(
            self._loaded, self._live, fitted, messages, settings, window=self._window,
            started=start, emit=emit, busy=lambda: self._refresh_state(busy=True),
            compute=plan.words(), output=output, options=options, spec_off=spec_off)
        self._ranks.end_turn(self._loaded, self._live, done)
        self._refresh_state(done.stats)
        measure = self._drafting.measurement(self._loaded, settings, done,
                                             self._live.tokens)
        if measure is not None:  # speculative=auto: a verifying pass timed after this turn
            self._worker.later(lambda: measure(self._loaded, self._live))
        figures.done(done)

    def decode_in(self, batch: BatchDecoder | None) -> None:  # with others', or None: alone
        self._pipeline.batch = batch

    def cancel(self) -> None:
        """Stop the running (and any queued) turn within about one token or chunk."""
        self._worker.cancel_all()

    def prefill(self, tokens: Sequence[int], settings: GenerationSettings, *, floor: int = 0,
                current: Callable[[], bool] = lambda: True) -> int:
        """Extend the cache toward ``tokens`` while the user types, trimming it no
        shorter than ``floor``; blocks until done, superseded or cancelled. False
        from ``current()`` (asked on the engine thread: a turn ran since ``tokens``
        were planned) leaves the cache alone. Returns the typing-prefilled tokens."""
        self._refuse("typing")
        wanted = list(tokens)

        def extend() -> int:
            if not current():
                return 0
            self._match_compute(settings.compute_dtype)
            self.cpu_matmul.match(self._loaded, settings.cpu_matmul)
            return self._typing.extend(self._live, wanted, kv_bits=settings.kv_bits, floor=floor)
        return self._typing.run(extend)

    def prefill_chunks(self, kv_bits: int | None) -> list[PrefillChunk]:
        """The prefill chunks measured on the model held now, at ``kv_bits``."""
        return self._pipeline.chunks.recent(prefill_setup(self._loaded, kv_bits))

    def supersede_typing(self) -> None:
        """Stop a running or queued typing prefill or preparation (a turn goes first)."""
        self._typing.supersede()
        self.prepared.supersede()

    def warm_up(self) -> None:
        """A server's first-call costs paid before its first request: the vocabulary's
        reads, the grammar's token table, a message computed on a throwaway cache (the
        template's compilation, MLX's kernels and buffers). The live cache is left
        alone; ranks that compute only together are warmed by their first turn."""
        if self._ranks.refusal("warm_up"):
            return
        self.prompts.read_vocabulary()
        read_grammar_tokenizer(self._loaded.tokenizer)
        ids = render(self._loaded.tokenizer, [Message("user", "Hello.")],
                     strftime_now=SessionClock(time.time()))  # as a turn renders
        self._call(lambda: compute_once(self._loaded.model, ids))

    def kv_bytes_per_token(self, kv_bits: int | None = None) -> int:
        """What one more token adds to the KV cache, measured: a fresh cache is
        fed one token, then a second, and the arrays' bytes compared (a
        recurrent layer's fixed state cancels out)."""
        return self._call(lambda: self._ranks.probe_bytes_per_token(self._loaded, kv_bits))

    # -- the model ---------------------------------------------------------------------
    def switch_model(self, loaded: LoadedModel) -> None:
        self._refuse("switch_model")

        def job() -> None:
            had = bool(self._live.tokens)
            self._loaded = loaded
            self._start_cold()
            if had:
                self._live.reset("model changed", report=True)
                self._refresh_state()
        self._call(job)

    def _match_compute(self, wanted: str | None) -> None:
        """Cast the model to the session's compute dtype (None: the policy's), or
        without ``casts_weights`` follow the dtype they hold; the cache, computed
        in the other one, starts cold."""
        info = self._loaded.info
        held = precision.current_dtype(self._loaded.model)  # another engine may cast them
        dtype = (wanted or info.default_compute_dtype) if self.casts_weights else held
        if dtype == info.compute_dtype == held:
            return
        self._refuse("compute_dtype")
        had = bool(self._live.tokens)
        self._loaded = recast(self._loaded, dtype) if dtype != held else retyped(self._loaded)
        self._start_cold()
        if had:
            self._live.reset("compute dtype changed", report=True)

    def _start_cold(self) -> None:
        self._live = self._ranks.new_live(self._loaded.model)
        self._disk = self._ranks.disk(self._loaded, self._live)
        self._drafting.model_changed(self._loaded)
        self._window = self._loaded.info.context_window
        self._refresh_state()

    def _refuse(self, feature: str, mode: str = "") -> None:
        problem = self._ranks.refusal(feature, mode)
        if problem:
            raise EngineError(problem)

    # -- the cache ----------------------------------------------------------------------
    def drop_cache(self, reason: str = "cache dropped") -> None:
        self._refreshed(lambda: self._live.reset(reason))

    def load_snapshot(self, path: Path, *, expected_checksum: str | None = None,
                      conversation: Sequence[Message] = ()) -> CacheLoad:
        """Make a whole-cache snapshot (a session saved before segments) the live
        cache. ``conversation`` is what it holds (for miss reasons). On rejection
        the live cache is left cold and the reason is reported by the next turn."""
        return self._refreshed(lambda: self._disk.load_snapshot(
            path, expected_checksum=expected_checksum, conversation=conversation))

    def save_segment(self, path: Path, start: int, end: int | None = None) -> SegmentInfo:
        """Write the live cache's positions from ``start`` to ``end`` (None: its end)
        and the checkpoints of layers that cannot be sliced, to a new file: ``path``
        or a fresh name beside it (the info's). Ranks that can no longer answer
        fail it as a full disk would (OSError: the reply is kept)."""
        try:
            self._ranks.check()
        except EngineError as exc:
            raise OSError(str(exc)) from None
        return self._call(lambda: self._disk.save_segment(path, start, end))

    def load_segments(self, refs: Sequence[SegmentRef], *,
                      conversation: Sequence[Message] = ()) -> CacheLoad:
        """Make consecutive segments the live cache. A damaged or mismatched one
        stops the restore there: the tokens before it are kept, the rest recomputed."""
        return self._refreshed(lambda: self._disk.load_segments(refs, conversation=conversation))

    def needs_restore(self, tokens: Sequence[int]) -> bool:
        """The live cache holds tokens the prompt does not, and cannot be trimmed
        back to them (a wrapped sliding window, a recurrent state)."""
        return self._call(Bookkeeping(lambda: self._live.needs_restore(tokens)))

    def mark_prefix(self, tokens: Sequence[int] | None, path: Path | None = None) -> None:
        """Checkpoint the cache to ``path`` once it holds exactly ``tokens`` (None:
        forget the mark). A cache that holds them already is written now when
        its layers can be sliced."""
        if tokens is not None:
            self._refuse("pins")
        self._call(lambda: self._marks.mark(tokens, path, self._live, self._loaded.info))

    def take_prefix(self) -> PrefixSaved | None:
        """The prefix written since the last call (or why it was not), once."""
        return self._call(self._marks.take)

    # -- speculation -------------------------------------------------------
    def set_draft(self, loaded: LoadedModel | None, spec: str = "") -> None:
        """Make ``loaded`` the draft model (None unloads it). Raises EngineError
        (and keeps the current draft) when it cannot draft for this model."""
        if loaded is not None:
            self._refuse("draft")

        def job() -> None:
            self._drafting.set(self._loaded, loaded, spec)
            mx.clear_cache()
            self._refresh_state()
        self._call(job)

    @property
    def draft_info(self) -> ModelInfo | None:
        return self._drafting.info

    @property
    def draft_spec(self) -> str | None:
        """The spec the draft model was loaded from (None: no draft)."""
        return self._drafting.spec

    @property
    def draft_cached_tokens(self) -> list[int]:
        """The token ids the draft model's cache holds (empty without a draft)."""
        return self._drafting.cached_tokens

    def verify_cost(self) -> auto.VerifyCost | None:
        """What verifying proposals costs on this device, once measured for the
        loaded model (``speculative=auto``; None before)."""
        return self._drafting.cost

    def speculation_problem(self, mode: str) -> str | None:
        """Why the loaded model cannot speculate in ``mode`` now, or None
        (auto never refuses: it decodes plainly where lookup cannot run)."""
        if mode not in ("off", "auto") and (problem := self._ranks.refusal("speculation", mode)):
            return problem
        return self._drafting.problem(
            mode, lambda: self._call(lambda: trim_problem(self._loaded, "the model")))

    # -- the gauges' figures ---------------------------------------------------------------
    def _refreshed(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the engine thread, then the gauges' figures read again."""
        def job() -> Any:
            result = fn()
            self._refresh_state()
            return result
        return self._call(job)

    def _refresh_state(self, stats: TurnStats | None = None, busy: bool = False) -> None:
        self._state = gauge_state(self._loaded, self._live, window=self._window,
                                  ranks=self._ranks, drafting=self._drafting, busy=busy,
                                  stats=stats or self._state.last_stats)
