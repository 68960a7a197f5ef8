"""ChatEngine: one model, one live KV cache, one generation thread.

All MLX work runs on the engine's own thread (MLX streams are per thread).
The turn itself is ``TurnPipeline``'s (turn_pipeline.py), the snapshot, segment
and prefix calls ``CacheFiles``'s (cache_files.py); this module holds the
engine's making, its model and compute dtype, its state for the gauges, and
the calls it hands on to its collaborators.
"""

from __future__ import annotations

import atexit
import weakref
from typing import Any, Callable, Sequence

import mlx.core as mx

from mlxchat.chat import GenerationSettings, Message, TurnStats
from mlxchat.engine import kv, prompt, reasoning, spec_auto, template_delta
from mlxchat.engine.ahead import TypingPrefill
from mlxchat.engine.cache_files import CacheFiles
from mlxchat.engine.compute import PROCESS_LOCK, ComputeLock
from mlxchat.engine.cpu_choice import CpuMatmul
from mlxchat.engine.drafting import Drafting, MeasureVerify
from mlxchat.engine.events import EngineState, RankFigures
from mlxchat.engine.live import LiveCache, compute_once
from mlxchat.engine.persist import DiskCache
from mlxchat.engine.prefix import PrefixMarks
from mlxchat.engine.speculative import trim_problem
from mlxchat.engine.template_delta import TemplateOptions
from mlxchat.engine.turn_pipeline import ABANDONED, TurnPipeline  # noqa: F401 (re-exported)
from mlxchat.engine.view import LiveView, view_of
from mlxchat.engine.worker import EngineThread
from mlxchat.models import precision
from mlxchat.models.info import LoadedModel, ModelInfo, recast, retyped

_LIVE: "weakref.WeakSet[ChatEngine]" = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    for engine in list(_LIVE):
        engine.close()


class ChatEngine(TurnPipeline, CacheFiles):
    """Drive one loaded model; every public method is safe from any thread.

    Its parts with state of their own are collaborators it makes and hands what
    they need: the draft model and verify cost (``Drafting``), prefix marks
    (``PrefixMarks``), typing prefill (``TypingPrefill``) and, per model, the
    disk cache (``DiskCache``). ``measure_verify`` times a verifying pass for
    ``speculative=auto`` (``spec_auto.measure``; tests fix it). ``turn()`` and
    its pipeline come from ``TurnPipeline``, the snapshot and segment calls from
    ``CacheFiles``."""

    segments_per_rank = False
    """Each rank writes its own shard of a segment (a split model): the files
    of a branch are not joined (compaction would split them from their ranks)."""

    def __init__(self, loaded: LoadedModel, *, chunk_seconds: float = 0.25,
                 measure_verify: MeasureVerify = spec_auto.measure,
                 compute_owner: str = "chat", compute: ComputeLock = PROCESS_LOCK,
                 casts_weights: bool = True):
        # compute_owner: whose this engine is in the compute lock's line ('chat',
        # 'api'); engines over one model take turns under ``compute``.
        # casts_weights=False: another engine owns the shared weights' dtype; this
        # one computes in whatever they hold (the API beside the chat).
        self.casts_weights = casts_weights
        # Prefill chunks aim at chunk_seconds each, so a cancel lands quickly.
        self.chunk_seconds = chunk_seconds
        self._loaded = loaded
        self._live: LiveCache
        self._disk: DiskCache
        self._state = EngineState()
        self._chunk = 64
        self._drafting = Drafting(measure=measure_verify)
        self.cpu_matmul = CpuMatmul()
        self._marks = PrefixMarks()
        self._worker = EngineThread(owner=compute_owner, compute=compute)
        self._call = self._worker.call  # fn() on the engine thread, waited for
        self._typing = TypingPrefill(submit=self._worker.submit, alive=self._worker.alive,
                                     feed=self._typing_feed, refresh=self._refresh_state)
        _LIVE.add(self)
        self._call(self._start_cold)

    def close(self) -> None:
        """Cancel any turn and stop the thread; called at exit for live engines."""
        _LIVE.discard(self)
        self._worker.close()

    # -- public API ------------------------------------------------------
    @property
    def loaded(self) -> LoadedModel:
        return self._loaded

    @property
    def info(self) -> ModelInfo:
        return self._loaded.info

    @property
    def cached_tokens(self) -> list[int]:
        return list(self._live.tokens)

    def state(self) -> EngineState:
        return self._state

    def live_view(self) -> LiveView:
        """A read-only picture of the live cache now: its tokens, figures and
        copies of its layers (what tests check instead of the engine's insides)."""
        return self._call(lambda: view_of(self._live))

    def draft_view(self) -> LiveView | None:
        """The same of the draft model's cache (None without a draft)."""
        return self._call(lambda: None if (draft := self._drafting.draft) is None
                          else view_of(draft.live))

    def cancel(self) -> None:
        """Stop the running (and any queued) turn within about one token or chunk."""
        self._worker.cancel_all()

    def prefill(self, tokens: Sequence[int], settings: GenerationSettings, *, floor: int = 0,
                current: Callable[[], bool] = lambda: True) -> int:
        """Extend the cache toward ``tokens`` while the user types, trimming it no
        shorter than ``floor``; blocks until done, superseded or cancelled.
        ``current()`` is asked on the engine thread first: False (a turn ran since
        ``tokens`` were planned) leaves the cache alone. Returns the tokens the
        cache holds from typing prefill (0 when it was left alone)."""
        wanted = list(tokens)

        def extend() -> int:
            if not current():
                return 0
            self._match_compute(settings.compute_dtype)
            self.cpu_matmul.match(self._loaded, settings.cpu_matmul)
            return self._typing.extend(self._live, wanted, kv_bits=settings.kv_bits, floor=floor)
        return self._typing.run(extend)

    def supersede_typing(self) -> None:
        """Stop a running or queued typing prefill (a turn takes precedence)."""
        self._typing.supersede()

    def warm_up(self) -> None:
        """Render a message and compute it on a throwaway cache, so that a
        server's first request pays none of the first-call costs (the template's
        compilation, MLX's kernels and buffers). The live cache is left alone."""
        ids = prompt.render(self._loaded.tokenizer, [Message("user", "Hello.")])
        self._call(lambda: compute_once(self._loaded.model, ids))

    def fit(self, messages: Sequence[Message], settings: GenerationSettings, *,
            options: TemplateOptions = TemplateOptions()) -> prompt.FittedPrompt:
        """Render the whole conversation and fit it to the window under the
        settings' policy (a new ledger, or ``history=template``)."""
        return prompt.fit(self._loaded.tokenizer, messages, window=self.window(settings),
                          max_tokens=self.reply_budget(settings),
                          policy=settings.context_policy, template_kwargs=options.kwargs())

    def message_ids(self, text: str, *, system: str | None, previous: Sequence[int] | None,
                    options: TemplateOptions = TemplateOptions()) -> list[int]:
        """The token ids a user message adds: after ``previous`` (the ids of the
        reply it follows), or as the first message of a conversation (None).
        Raises TemplateNotIncremental when the template cannot be split so."""
        tokenizer = self._loaded.tokenizer
        if previous is None:
            return template_delta.head(tokenizer, system, text, options)
        return template_delta.follow_up(tokenizer, text, previous=previous, options=options)

    def result_ids(self, results: Sequence[Message], *, reply: Message,
                   previous: Sequence[int], options: TemplateOptions = TemplateOptions()
                   ) -> list[int]:
        """The token ids tool results add after ``reply`` (whose ids are
        ``previous``). Raises TemplateNotIncremental when the template cannot
        be split so."""
        return template_delta.tool_results(self._loaded.tokenizer, results, reply=reply,
                                           previous=previous, options=options)

    def reply_reserve(self, settings: GenerationSettings) -> int:
        """Tokens kept free for the reply when deciding whether a prompt fits."""
        return prompt.reply_reserve(self.reply_budget(settings), self.window(settings))

    def reply_budget(self, settings: GenerationSettings) -> int:
        """Tokens a reply may take: the answer's, plus the reasoning's for a
        model that reasons (unless /think off)."""
        reasons = reasoning.cached_markup(self._loaded.tokenizer).reasons
        extra = settings.max_reasoning_tokens if reasons and settings.thinking is not False else 0
        return settings.max_tokens + extra

    def kv_bytes_per_token(self, kv_bits: int | None = None) -> int:
        """What one more token adds to the KV cache, measured: a fresh cache is
        fed one token, then a second, and the arrays' bytes compared (a
        recurrent layer's fixed state cancels out)."""
        loaded = self._loaded
        return self._call(lambda: kv.probe_bytes_per_token(loaded.model, kv_bits,
                                                           loaded.info.head_dim))

    def window(self, settings: GenerationSettings) -> int:
        """The context window a turn gets: the model's, or the session's cap below it."""
        model = self._loaded.info.context_window
        return min(model, settings.context_window) if settings.context_window else model

    def render_tokens(self, messages: Sequence[Message], *,
                      options: TemplateOptions = TemplateOptions()) -> list[int]:
        """The conversation through the template as it would render it now
        (no generation prompt)."""
        return prompt.render(self._loaded.tokenizer, messages, generation_prompt=False,
                             **options.kwargs())

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return len(prompt.render(self._loaded.tokenizer, messages))

    def message_tokens(self, messages: Sequence[Message]) -> list[int]:
        return prompt.message_token_counts(self._loaded.tokenizer, messages)

    def drop_cache(self, reason: str = "cache dropped") -> None:
        self._refreshed(lambda: self._live.reset(reason))

    def switch_model(self, loaded: LoadedModel) -> None:
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
        had = bool(self._live.tokens)
        self._loaded = recast(self._loaded, dtype) if dtype != held else retyped(self._loaded)
        self._start_cold()
        if had:
            self._live.reset("compute dtype changed", report=True)

    def _start_cold(self) -> None:
        self._live = self._new_live()
        self._disk = DiskCache(self._loaded, self._live)
        self._drafting.model_changed(self._loaded)
        self._window = self._loaded.info.context_window
        self._refresh_state()

    def _new_live(self) -> LiveCache:
        """The live cache of the loaded model (a distributed engine mirrors it)."""
        return LiveCache(self._loaded.model)


    # -- speculation -------------------------------------------------------
    def set_draft(self, loaded: LoadedModel | None, spec: str = "") -> None:
        """Make ``loaded`` the draft model (None unloads it). Raises EngineError
        (and keeps the current draft) when it cannot draft for this model."""
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

    def verify_cost(self) -> spec_auto.VerifyCost | None:
        """What verifying proposals costs on this device, once measured for the
        loaded model (``speculative=auto``; None before)."""
        return self._drafting.cost

    def speculation_problem(self, mode: str) -> str | None:
        """Why the loaded model cannot speculate in ``mode`` now, or None
        (auto never refuses: it decodes plainly where lookup cannot run)."""
        return self._drafting.problem(
            mode, lambda: self._call(lambda: trim_problem(self._loaded, "the model")))

    # -- engine-thread internals -----------------------------------------
    def _refreshed(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the engine thread, then the gauges' figures read again."""
        def job() -> Any:
            result = fn()
            self._refresh_state()
            return result
        return self._call(job)

    def _refresh_state(self, stats: TurnStats | None = None, busy: bool = False) -> None:
        info, live = self._loaded.info, self._live
        self._state = EngineState(
            model_name=info.name, cached_tokens=len(live.tokens),
            context_window=min(self._window, info.context_window), kv_bytes=live.nbytes,
            kv_bits=live.bits, kv_dtype=live.dtype_label,
            cache_source=live.source if live.tokens else "cold",
            weights_bytes=info.weights_bytes,
            bits_per_weight=info.bits_per_weight, scales_dtype=info.scales_dtype,
            quantization=info.quantization, compute_dtype=info.compute_dtype,
            peak_memory_bytes=mx.get_peak_memory(),
            draft_model=self._drafting.info.name if self._drafting.info else "",
            draft_kv_bytes=self._drafting.kv_bytes,
            busy=busy, last_stats=stats or self._state.last_stats, layout=self._layout_text(),
            ranks=self._rank_list())

    def _layout_text(self) -> str:
        """How the model is split across ranks, for the gauges ('' on one rank)."""
        return ""

    def _rank_list(self) -> list[RankFigures]:
        """Each rank's own figures (a split model's; none on one rank)."""
        return []

    def _after_turn(self) -> None:
        """Engine thread, after a turn's reply, before its end is said (a split
        model gathers its ranks' figures here)."""

    @property
    def compute(self) -> ComputeLock:
        """The lock this engine computes under (shared by the engines of a process)."""
        return self._worker.compute

