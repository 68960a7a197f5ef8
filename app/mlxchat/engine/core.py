"""ChatEngine: one model, one live KV cache, one generation thread.

All MLX work runs on the engine's own thread (MLX streams are per thread).
A turn renders the whole conversation, reuses the longest cached prefix,
prefills the rest in cancellable chunks and streams the reply as events.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any, Callable, Iterator, Sequence

import mlx.core as mx
from mlx_lm.sample_utils import make_logits_processors, make_sampler

from mlxchat.chat import GenerationSettings, Message, TurnStats
from mlxchat.engine import kv, prompt, reasoning, template_delta
from mlxchat.engine.events import (EngineError, EngineState, Event, PrefillProgress, TextDelta,
                                   TurnDone)
from mlxchat.engine.ahead import TypingPrefill
from mlxchat.engine.drafting import Drafting
from mlxchat.engine.live import LiveCache
from mlxchat.engine.persist import DiskCache
from mlxchat.engine.prefix import PrefixMarks
from mlxchat.engine.progress import LiveFigures
from mlxchat.engine.results import Decode, Prefill, Cancelled
from mlxchat.engine.template_delta import TemplateOptions
from mlxchat.engine.view import LiveView, view_of
from mlxchat.models.info import LoadedModel, ModelInfo

_DONE = object()
_LIVE: "weakref.WeakSet[ChatEngine]" = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    for engine in list(_LIVE):
        engine.close()


class ChatEngine(TypingPrefill, DiskCache, Drafting, PrefixMarks):
    """Drive one loaded model; every public method is safe from any thread."""

    def __init__(self, loaded: LoadedModel, *, chunk_seconds: float = 0.25):
        # Prefill chunks aim at chunk_seconds each, so a cancel lands quickly.
        self.chunk_seconds = chunk_seconds
        self._loaded = loaded
        self._jobs: queue.Queue = queue.Queue()
        self._cancel = threading.Event()  # the running turn's; read on the engine thread
        self._cancels: set[threading.Event] = set()
        self._live: LiveCache
        self._state = EngineState()
        self._chunk = 64
        self._thread = threading.Thread(target=self._run, name="mlxchat-engine", daemon=True)
        self._thread.start()
        _LIVE.add(self)
        self._call(self._start_cold)

    # -- thread plumbing -------------------------------------------------
    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                # MLX aborts the process at exit if a thread's streams outlive it.
                mx.synchronize()
                mx.clear_streams()
                return
            fn, fut = job
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # handed to the caller's thread
                    fut.set_exception(exc)

    def _call(self, fn: Callable[[], Any]) -> Any:
        if threading.current_thread() is self._thread:
            return fn()
        fut: Future = Future()
        self._jobs.put((fn, fut))
        return fut.result()

    def close(self) -> None:
        """Cancel any turn and stop the thread; called at exit for live engines."""
        _LIVE.discard(self)
        if self._thread.is_alive():
            self.cancel()
            self._jobs.put(None)
            self._thread.join(timeout=30)

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
        return self._call(lambda: None if self._draft is None else view_of(self._draft.live))

    def cancel(self) -> None:
        """Stop the running (and any queued) turn within about one token or chunk."""
        for ev in list(self._cancels):
            ev.set()

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
        self._cancels.add(cancel)
        fut: Future = Future()
        planned = (conversation if isinstance(conversation, prompt.FittedPrompt)
                   else list(conversation))

        def job() -> None:
            self._cancel = cancel
            self._turn(planned, settings, events.put)
        self._jobs.put((job, fut))
        fut.add_done_callback(lambda _: events.put(_DONE))
        try:
            while True:
                item = events.get()
                if item is _DONE:
                    fut.result()  # re-raise a refusal or failure here
                    return
                yield item
        finally:
            if not fut.done():
                cancel.set()
                fut.exception()
            self._cancels.discard(cancel)

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
        def job() -> None:
            self._live.reset(reason)
            self._refresh_state()
        self._call(job)

    def switch_model(self, loaded: LoadedModel) -> None:
        def job() -> None:
            had = bool(self._live.tokens)
            self._loaded = loaded
            self._start_cold()
            self._keep_fitting_draft()
            if had:
                self._live.reset("model changed", report=True)
                self._refresh_state()
        self._call(job)

    def _start_cold(self) -> None:
        self._live = LiveCache(self._loaded.model)
        self._verify_cost = None  # measured again for this model
        self._window = self._loaded.info.context_window
        self._refresh_state()

    # -- engine-thread internals -----------------------------------------
    def _refresh_state(self, stats: TurnStats | None = None, busy: bool = False) -> None:
        info, live = self._loaded.info, self._live
        self._state = EngineState(
            model_name=info.name, cached_tokens=len(live.tokens),
            context_window=min(self._window, info.context_window), kv_bytes=live.nbytes,
            kv_bits=live.bits, kv_dtype=live.dtype_label,
            cache_source=live.source if live.tokens else "cold",
            weights_bytes=info.weights_bytes,
            bits_per_weight=info.bits_per_weight, scales_dtype=info.scales_dtype,
            peak_memory_bytes=mx.get_peak_memory(),
            draft_model=self.draft_info.name if self.draft_info else "",
            draft_kv_bytes=self._draft_kv_bytes,
            busy=busy, last_stats=stats or self._state.last_stats)

    def _prefill(self, tokens: list[int], emit: LiveFigures) -> Prefill:
        """Feed ``tokens`` in chunks sized to ~chunk_seconds; progress counts
        them against every token the turn computes (the tail too)."""
        model, live = self._loaded.model, self._live
        total, done, start = len(tokens), 0, time.perf_counter()
        emit(PrefillProgress(0, emit.total))
        while done < total:
            if self._cancel.is_set():
                raise Cancelled
            n = self._chunk_to_mark(min(self._chunk, total - done))
            t0 = time.perf_counter()
            live.feed(model, tokens[done:done + n])
            dt = time.perf_counter() - t0
            self._reach_mark()
            done += n
            if n == self._chunk:
                self._chunk = max(16, min(2048, int(n * self.chunk_seconds / max(dt, 1e-4))))
            elapsed = time.perf_counter() - start
            emit(PrefillProgress(done, emit.total, done / max(elapsed, 1e-9)))
        return Prefill(tokens=total, seconds=time.perf_counter() - start)

    def _turn(self, planned: list[Message] | prompt.FittedPrompt,
              settings: GenerationSettings, emit: Callable[[Event], None]) -> None:
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
        typed, typed_s = live.typed_ahead(reuse.tokens)
        if settings.seed is not None:
            mx.random.seed(settings.seed)
        self._window = self.window(settings)
        self._refresh_state(busy=True)
        prefill, decode, drafted = Prefill(), Decode(), (0, False)
        figures = LiveFigures(live, len(tokens) - reuse.tokens, emit)
        try:
            prefill = self._prefill(tokens[reuse.tokens:len(tokens) - tail], figures)
            drafted = self._follow_draft(tokens[:len(tokens) - tail], settings)
            decode = self._decode(tokens[len(tokens) - tail:], settings, emit=figures,
                                  turn_start=start, prompt_tokens=tokens)
        except Cancelled:
            decode.finish_reason = "cancelled"
        finally:
            live.settle(fitted.messages)
        live.conversation.append(("assistant", decode.reply))
        live.source = "warm"
        stats = TurnStats(
            prompt_tokens=len(tokens), reused_tokens=reuse.tokens,
            prefilled_tokens=len(tokens) - reuse.tokens, miss_reason=reuse.reason,
            typed_prefill_tokens=typed, typed_prefill_s=typed_s,
            cache_source=reuse.source, dropped_messages=fitted.dropped,
            context_window=self.window(settings), kv_bits=settings.kv_bits,
            weights_bytes=info.weights_bytes, finish_reason=decode.finish_reason,
            generated_tokens=decode.generated, reasoning_tokens=decode.reasoning_tokens,
            reasoning_s=decode.reasoning_s, ttft_s=decode.ttft_s,
            decode_tps=decode.decode_tps,
            prefill_tps=(len(tokens) - reuse.tokens)
            / max(prefill.seconds + decode.first_pass_s, 1e-9) if decode.generated else 0.0,
            total_s=time.perf_counter() - start, context_used=len(live.tokens),
            kv_bytes=live.nbytes, peak_memory_bytes=mx.get_peak_memory(),
            spec_mode=decode.speculation.mode,
            draft_tokens_proposed=decode.speculation.proposed,
            draft_tokens_accepted=decode.speculation.accepted,
            target_passes=decode.speculation.passes,
            draft_prefilled_tokens=drafted[0], draft_rebuilt=drafted[1] and reuse.tokens > 0)
        self._refresh_state(stats)
        self._measure_after(settings, decode.generated, decode.decode_tps)
        figures.done(TurnDone(reply=decode.reply, stats=stats, dropped_messages=fitted.dropped,
                              token_ids=decode.token_ids, reasoning=decode.reasoning))

    def _decode(self, tail: list[int], settings: GenerationSettings, *,
                emit: Callable[[Event], None], turn_start: float,
                prompt_tokens: Sequence[int] = ()) -> Decode:
        """Feed the tail and sample until an end token, a budget or a cancel;
        reasoning and answer are streamed as separate parts."""
        tokenizer, live = self._loaded.tokenizer, self._live
        window = self.window(settings)
        sampler = make_sampler(settings.temperature, settings.top_p, settings.min_p)
        processors = make_logits_processors(
            repetition_penalty=settings.repetition_penalty
            if settings.repetition_penalty != 1.0 else None)
        split = reasoning.Splitter.for_prompt(tokenizer, prompt_tokens,
                                              reasoning.cached_markup(tokenizer))
        think_budget = settings.max_reasoning_tokens if split.markup.reasons else 0
        budget = max(1, min(settings.max_tokens + think_budget,
                            window - len(live.tokens) - len(tail) + 1))
        out = Decode(finish_reason="length")
        def shown(segment: str, part: str) -> None:
            (out.reasoning_pieces if part == reasoning.REASONING else out.pieces).append(segment)
            emit(TextDelta(segment, out.generated, out.decode_tps, part=part,
                           acceptance=out.speculation.acceptance,
                           tokens_per_pass=out.speculation.tokens_per_pass(out.generated)))
        text = reasoning.PartText(tokenizer.detokenizer, shown)
        t_prompt = time.perf_counter()
        gen = self._token_stream(tail, settings, budget=budget, sampler=sampler,
                                 processors=processors, prompt_tokens=prompt_tokens,
                                 count=out.speculation)
        live.tokens.extend(tail)
        first_at = None
        try:
            for token, _ in gen:
                live.tokens.append(token)
                out.token_ids.append(token)
                now = time.perf_counter()
                if first_at is None:
                    first_at = now
                    out.ttft_s, out.first_pass_s = now - turn_start, now - t_prompt
                out.generated += 1
                if token in tokenizer.eos_token_ids:
                    out.finish_reason = "stop"
                    break
                if out.generated > 1:
                    out.decode_tps = (out.generated - 1) / max(now - first_at, 1e-9)
                was = split.part
                text.add(split.feed(token))
                out.reasoning_tokens = split.reasoning_tokens
                if reasoning.REASONING in (was, split.part):
                    out.reasoning_s = now - t_prompt
                if self._cancel.is_set():
                    out.finish_reason = "cancelled"
                    break
                if split.answer_tokens >= settings.max_tokens or (
                        split.part == reasoning.REASONING
                        and split.reasoning_tokens >= think_budget):
                    break  # a budget is spent: finish_reason stays 'length'
        finally:
            gen.close()
            text.add(split.flush())
            text.close()
        return out
