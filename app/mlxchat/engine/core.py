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
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache
from mlx_lm.sample_utils import make_logits_processors, make_sampler

from mlxchat.chat import GenerationSettings, Message, TurnStats
from mlxchat.engine import kv, prompt, snapshot
from mlxchat.engine.events import (EngineState, Event, PrefillProgress, SnapshotInfo,
                                   SnapshotLoad, TextDelta, TurnDone)
from mlxchat.models.info import LoadedModel

_DONE = object()
_LIVE: "weakref.WeakSet[ChatEngine]" = weakref.WeakSet()


@atexit.register
def _close_live_engines() -> None:
    for engine in list(_LIVE):
        engine.close()


class _Cancelled(Exception):
    pass


class ChatEngine:
    """Drive one loaded model; every public method is safe from any thread."""

    def __init__(self, loaded: LoadedModel, *, chunk_seconds: float = 0.25):
        # Prefill chunks aim at chunk_seconds each, so a cancel lands quickly.
        self.chunk_seconds = chunk_seconds
        self._loaded = loaded
        self._jobs: queue.Queue = queue.Queue()
        self._cancel = threading.Event()  # the running turn's; read on the engine thread
        self._cancels: set[threading.Event] = set()
        self._cache: list[Any] = []
        self._tokens: list[int] = []
        self._conversation: list[tuple[str, str]] = []
        self._source = "cold"
        self._pending_reason: str | None = None
        self._state = EngineState()
        self._chunk = 64
        self._fit_memo: tuple[tuple, prompt.FittedPrompt] | None = None
        self._thread = threading.Thread(target=self._run, name="mlxchat-engine", daemon=True)
        self._thread.start()
        _LIVE.add(self)
        self._call(self._reset_cache)

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
    def cached_tokens(self) -> list[int]:
        return list(self._tokens)

    def state(self) -> EngineState:
        return self._state

    def cancel(self) -> None:
        """Stop the running (and any queued) turn within about one token or chunk."""
        for ev in list(self._cancels):
            ev.set()

    def turn(self, messages: Sequence[Message], settings: GenerationSettings
             ) -> Iterator[Event]:
        """Run one turn; yields PrefillProgress, TextDelta and finally TurnDone.

        Raises EngineError (ContextOverflowError) before any event when refused.
        Closing the iterator early cancels the turn.
        """
        events: queue.Queue = queue.Queue()
        cancel = threading.Event()
        self._cancels.add(cancel)
        fut: Future = Future()
        messages = list(messages)

        def job() -> None:
            self._cancel = cancel
            self._turn(messages, settings, events.put)
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

    def check_fits(self, messages: Sequence[Message], settings: GenerationSettings) -> int:
        """Raise ContextOverflowError if a turn would be refused; else the
        number of messages the drop_oldest policy would leave out."""
        return self._fit(messages, settings).dropped

    def _fit(self, messages: Sequence[Message], settings: GenerationSettings
             ) -> prompt.FittedPrompt:
        """Render and fit the conversation; the last result is kept, so the
        check before a send and the turn itself tokenize the history once."""
        loaded = self._loaded
        key = (id(loaded), tuple((m.role, m.content) for m in messages),
               settings.max_tokens, settings.context_policy)
        memo = self._fit_memo
        if memo is not None and memo[0] == key:
            return memo[1]
        fitted = prompt.fit(loaded.tokenizer, messages, window=loaded.info.context_window,
                            max_tokens=settings.max_tokens, policy=settings.context_policy)
        self._fit_memo = (key, fitted)
        return fitted

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return len(prompt.render(self._loaded.tokenizer, messages))

    def message_tokens(self, messages: Sequence[Message]) -> list[int]:
        return prompt.message_token_counts(self._loaded.tokenizer, messages)

    def save_snapshot(self, path: Path) -> SnapshotInfo:
        info = self._loaded.info

        def job() -> SnapshotInfo:
            if not self._tokens:
                raise ValueError("the KV cache is empty: nothing to save")
            return snapshot.save(path, self._cache, self._tokens,
                                 fingerprint=info.fingerprint,
                                 template_hash=info.chat_template_hash)
        return self._call(job)

    def load_snapshot(self, path: Path, *, expected_checksum: str | None = None,
                      conversation: Sequence[Message] = ()) -> SnapshotLoad:
        """Make a saved cache the live one. ``conversation`` is what it holds
        (for miss reasons). On rejection the live cache is left cold and the
        reason is reported by the next turn."""
        info = self._loaded.info

        def job() -> SnapshotLoad:
            try:
                snap = snapshot.load(path, fingerprint=info.fingerprint,
                                     template_hash=info.chat_template_hash,
                                     num_layers=len(make_prompt_cache(self._loaded.model)),
                                     expected_checksum=expected_checksum)
            except snapshot.SnapshotRejected as exc:
                self._reset_cache(f"snapshot rejected: {exc}")
                return SnapshotLoad(ok=False, reason=str(exc))
            self._cache, self._tokens = snap.cache, snap.tokens
            self._conversation = [(m.role, m.content) for m in conversation]
            self._source, self._pending_reason = "snapshot", None
            self._refresh_state()
            return SnapshotLoad(ok=True, tokens=len(snap.tokens))
        return self._call(job)

    def drop_cache(self, reason: str = "cache dropped") -> None:
        self._call(lambda: self._reset_cache(reason))

    def switch_model(self, loaded: LoadedModel) -> None:
        def job() -> None:
            self._loaded = loaded
            self._reset_cache("model changed")
        self._call(job)

    # -- engine-thread internals -----------------------------------------
    def _reset_cache(self, reason: str | None = None) -> None:
        self._cache = make_prompt_cache(self._loaded.model)
        had = bool(self._tokens)
        self._tokens, self._conversation, self._source = [], [], "cold"
        self._pending_reason = reason if (had or reason and reason.startswith("snapshot")) else None
        mx.clear_cache()
        self._refresh_state()

    def _refresh_state(self, stats: TurnStats | None = None, busy: bool = False) -> None:
        info = self._loaded.info
        self._state = EngineState(
            model_name=info.name, cached_tokens=len(self._tokens),
            context_window=info.context_window, kv_bytes=kv.kv_bytes(self._cache),
            kv_bits=kv.bits(self._cache), kv_dtype=kv.dtype_label(self._cache),
            cache_source=self._source if self._tokens else "cold",
            weights_bytes=info.weights_bytes,
            bits_per_weight=info.bits_per_weight, peak_memory_bytes=mx.get_peak_memory(),
            busy=busy, last_stats=stats or self._state.last_stats)

    def _reuse(self, tokens: list[int], settings: GenerationSettings, tail: int,
               fitted: prompt.FittedPrompt, messages: list[Message]) -> tuple[int, str | None]:
        """Trim the cache to the longest prefix it shares with ``tokens``."""
        reason = self._pending_reason
        self._pending_reason = None
        if kv.bits(self._cache) != settings.kv_bits and self._tokens:
            if settings.kv_bits and kv.bits(self._cache) is None:
                self._cache = kv.quantize(self._cache, settings.kv_bits,
                                          self._loaded.info.head_dim)
            else:
                self._reset_cache()
                return 0, "KV bit width changed"
        shared = prompt.common_prefix(self._tokens, tokens)
        common = min(shared, len(tokens) - tail)  # the tail is always fed for logits
        if common < len(self._tokens):
            if not can_trim_prompt_cache(self._cache):
                self._reset_cache()
                return 0, "cache not trimmable"
            trim_prompt_cache(self._cache, len(self._tokens) - common)
            if shared < len(self._tokens):
                reason = reason or prompt.miss_reason(self._conversation, fitted, messages)
            del self._tokens[common:]
        return common, reason

    def _prefill(self, tokens: list[int], emit: Callable[[Event], None]) -> float:
        """Feed ``tokens`` in chunks sized to ~chunk_seconds; returns seconds spent."""
        model, total, done, start = self._loaded.model, len(tokens), 0, time.perf_counter()
        emit(PrefillProgress(0, total))
        while done < total:
            if self._cancel.is_set():
                raise _Cancelled
            n = min(self._chunk, total - done)
            t0 = time.perf_counter()
            model(mx.array(tokens[done:done + n])[None], cache=self._cache)
            mx.eval([c.state for c in self._cache])
            dt = time.perf_counter() - t0
            self._tokens.extend(tokens[done:done + n])
            done += n
            if n == self._chunk:
                self._chunk = max(16, min(2048, int(n * self.chunk_seconds / max(dt, 1e-4))))
            elapsed = time.perf_counter() - start
            emit(PrefillProgress(done, total, done / max(elapsed, 1e-9)))
        return time.perf_counter() - start

    def _turn(self, messages: list[Message], settings: GenerationSettings,
              emit: Callable[[Event], None]) -> None:
        info = self._loaded.info
        start = time.perf_counter()
        fitted = self._fit(messages, settings)
        tokens = fitted.tokens
        source = self._source if self._tokens else "cold"
        mx.reset_peak_memory()
        # generate_step gets the tail: its logits processors (repetition
        # penalty) then see the same recent context whatever was reused.
        tail = 1 if settings.repetition_penalty == 1.0 else min(20, len(tokens))
        reused, reason = self._reuse(tokens, settings, tail, fitted, messages)
        if reused == 0:
            source = "cold"
        if settings.kv_bits and kv.bits(self._cache) is None:
            self._cache = kv.quantize(self._cache, settings.kv_bits, info.head_dim)
        if settings.seed is not None:
            mx.random.seed(settings.seed)
        self._refresh_state(busy=True)
        body = tokens[reused:len(tokens) - tail]
        stats = TurnStats(prompt_tokens=len(tokens), reused_tokens=reused,
                          prefilled_tokens=len(tokens) - reused, miss_reason=reason,
                          cache_source=source, dropped_messages=fitted.dropped,
                          context_window=info.context_window, kv_bits=settings.kv_bits,
                          weights_bytes=info.weights_bytes)
        pieces: list[str] = []
        try:
            prefill_s = self._prefill(body, emit)
            self._decode(tokens[len(tokens) - tail:], settings, stats, pieces, emit,
                         start, prefill_s)
        except _Cancelled:
            stats.finish_reason = "cancelled"
        finally:
            mx.eval([c.state for c in self._cache])
            self._tokens = self._tokens[:kv.offset(self._cache)]
            self._conversation = [(m.role, m.content) for m in fitted.messages]
        reply = "".join(pieces)
        self._conversation.append(("assistant", reply))
        self._source = "warm"
        stats.total_s = time.perf_counter() - start
        stats.context_used = len(self._tokens)
        stats.kv_bytes = kv.kv_bytes(self._cache)
        stats.peak_memory_bytes = mx.get_peak_memory()
        self._refresh_state(stats)
        emit(TurnDone(reply=reply, stats=stats, dropped_messages=fitted.dropped))

    def _decode(self, tail: list[int], settings: GenerationSettings, stats: TurnStats,
                pieces: list[str], emit: Callable[[Event], None], start: float,
                prefill_s: float) -> None:
        tokenizer, window = self._loaded.tokenizer, self._loaded.info.context_window
        sampler = make_sampler(settings.temperature, settings.top_p, settings.min_p)
        processors = make_logits_processors(
            repetition_penalty=settings.repetition_penalty
            if settings.repetition_penalty != 1.0 else None)
        budget = max(1, min(settings.max_tokens, window - len(self._tokens) - len(tail) + 1))
        detok = tokenizer.detokenizer
        detok.reset()
        stats.finish_reason = "length"
        t_prompt = time.perf_counter()
        gen = generate_step(mx.array(tail), self._loaded.model, prompt_cache=self._cache,
                            max_tokens=budget, sampler=sampler, logits_processors=processors)
        self._tokens.extend(tail)
        first_at = None
        n = 0
        try:
            for token, _ in gen:
                n += 1
                self._tokens.append(token)
                now = time.perf_counter()
                if first_at is None:
                    first_at = now
                    stats.ttft_s = now - start
                    fed = stats.prefilled_tokens
                    stats.prefill_tps = fed / max(prefill_s + (now - t_prompt), 1e-9)
                if token in tokenizer.eos_token_ids:
                    stats.finish_reason = "stop"
                    break
                detok.add_token(token)
                stats.generated_tokens = n
                if n > 1:
                    stats.decode_tps = (n - 1) / max(now - first_at, 1e-9)
                segment = detok.last_segment
                if segment:
                    pieces.append(segment)
                    emit(TextDelta(segment, n, stats.decode_tps))
                if self._cancel.is_set():
                    stats.finish_reason = "cancelled"
                    break
        finally:
            gen.close()
            detok.finalize()
            segment = detok.last_segment
            if segment:
                pieces.append(segment)
                emit(TextDelta(segment, n, stats.decode_tps))
        stats.generated_tokens = n
