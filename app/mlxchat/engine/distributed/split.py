"""Rank 0 of a model split over several MLX ranks: a ``ChatEngine`` given
``SplitRanks`` (``split_engine``), whose live cache and decode loop tell the other ranks
(``rank_worker.RankWorker``) every step they must take with their own shard,
over MLX's collectives (``channel.Channel``): reset, trim, quantize, feed a
chunk, decode a reply (one go-on or stop flag per token), probe, save and
restore KV segments. Decisions (what to reuse, chunk sizes, when to stop)
are made here only, so the ranks stay in lockstep. Sampling runs on every
rank from the same seed over logits the collectives made identical.

Not across ranks yet, and refused in one line: typing prefill, pinned
prefixes, speculative decoding, whole-cache snapshots, switching models.
"""

from __future__ import annotations

import queue
import random
import time
from dataclasses import replace
from typing import Any, Callable, Sequence

import mlx.core as mx

from mlxchat.chat import Message, human_bytes
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.distributed.channel import GO_ON, NOT_ACROSS_RANKS, STOP, Channel, RankLost
from mlxchat.engine.distributed.rank_files import RankDisk
from mlxchat.engine.distributed.rank_worker import own_figures
from mlxchat.engine.events import EngineError, PrefillProgress, RankFigures, TextDelta, TurnDone
from mlxchat.engine.kv import prompt_cache
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.speculative.streams import Stream, plain_stream
from mlxchat.engine.thread.handoff import EventBox
from mlxchat.engine.thread.worker import EngineThread
from mlxchat.engine.turn.decode import OpenStream, looked_back
from mlxchat.engine.turn.pipeline import ABANDONED
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel
from mlxchat.models.sharding import ShardPlan
from mlxchat.turn_stats import TurnStats


def sampling_job(settings: GenerationSettings, before: Sequence[int]) -> dict[str, Any]:
    """What another rank needs to sample as rank 0 does: the settings, and the
    tokens before the stream its repetition penalty looks back over."""
    return dict(temperature=settings.temperature, top_p=settings.top_p, min_p=settings.min_p,
                top_k=settings.top_k, repetition_penalty=settings.repetition_penalty,
                repetition_context=settings.repetition_context,
                before=looked_back(settings, before))


class MirroredLive(LiveCache):
    """A live cache whose every change to the arrays is first sent to the other
    ranks, which make the same change to their shard of it."""

    def __init__(self, model: Any, channel: Channel):
        self.channel = channel
        super().__init__(model)

    def reset(self, reason: str | None = None, *, report: bool = False) -> None:
        if self.channel.lost is None:
            self.channel.send("reset")
        super().reset(reason, report=report)

    def match_bits(self, kv_bits: int | None, head_dim: int) -> str | None:
        if kv_bits and self.bits is None:
            self.channel.send("quantize", bits=kv_bits, head_dim=head_dim)
        return super().match_bits(kv_bits, head_dim)

    def trim_to(self, n: int) -> None:
        self.channel.send("trim", by=len(self.tokens) - n)
        super().trim_to(n)

    def feed(self, model: Any, tokens: Sequence[int]) -> None:
        self.channel.send("feed", tokens=list(tokens))
        try:
            super().feed(model, tokens)
        except RuntimeError as exc:
            raise self.channel.failed(exc) from None

    def settle(self, conversation: Sequence[Message]) -> None:
        if self.channel.lost is None:
            return super().settle(conversation)
        # The arrays wait on a collective that failed: forget them, here only.
        self.tokens, self.conversation, self.source = [], [], "cold"


def mirrored_stream(channel: Channel, job: dict[str, Any],
                    open_inner: Callable[[], Stream], shown: list[int]) -> Stream:
    """Rank 0's reply tokens, each after telling the other ranks to go on;
    closing it early tells them to stop. A lost rank ends the stream. Tokens
    are noted in ``shown`` (what a turn given up on keeps)."""
    inner: Stream | None = None
    ended = False
    try:
        channel.send("decode", **job)
        inner = open_inner()
        while True:
            try:
                item = next(inner)
            except StopIteration:
                ended = True
                return
            shown.append(item[0])
            yield item  # a consumer that stops here skips the go-on: finally says stop
            channel.flag(GO_ON)
    except (RuntimeError, RankLost) as exc:  # a rank was lost: the reply ends here
        if isinstance(exc, RuntimeError):
            channel.failed(exc)
        ended = True
    finally:
        if not ended and channel.lost is None:
            channel.flag(STOP)
        if inner is not None:
            inner.close()


class SplitRanks:
    """The ranks of a model split by ``plan`` over ``channel``'s group, as rank 0's
    engine asks them (``engine/turn/ranks.py``'s ``Ranks``)."""

    segments_per_rank = True

    def __init__(self, channel: Channel, plan: ShardPlan, *, rank_timeout_s: float = 30.0):
        self.channel, self.plan = channel, plan
        self.rank_timeout_s = rank_timeout_s
        """A turn that hears nothing from the ranks this long ends, cut short."""
        self._shown_ids: list[int] = []
        self._figures: list[RankFigures] = []
        self._watch = TurnWatch()

    def check(self) -> None:
        if self._watch.abandoned:  # the engine thread waits on a rank forever
            raise EngineError(f"{self.channel.lost}; start mlxchat --hosts again")

    def refusal(self, feature: str, mode: str = "") -> str | None:
        return _REFUSALS.get(feature)

    def new_live(self, model: Any) -> LiveCache:
        return MirroredLive(model, self.channel)

    def disk(self, loaded: LoadedModel, live: LiveCache) -> RankDisk:
        return RankDisk(loaded, live, self.channel, self.plan.label)

    def probe_bytes_per_token(self, loaded: LoadedModel, kv_bits: int | None) -> int:
        """This rank's share of one more token's KV (each rank probes its own)."""
        self.channel.send("probe", bits=kv_bits, head_dim=loaded.info.head_dim)
        return prompt_cache.probe_bytes_per_token(loaded.model, kv_bits, loaded.info.head_dim)

    # -- the turn --------------------------------------------------------------------
    def watch_turn(self, planned: Any, settings: GenerationSettings, loaded: LoadedModel,
                   window: int) -> None:
        self._watch.begin(prompt=getattr(planned, "tokens", None), window=window,
                          kv_bits=settings.kv_bits, weights_bytes=loaded.info.weights_bytes)

    def next_event(self, events: EventBox) -> Any:
        """The turn's next event; when the ranks have been silent for
        ``rank_timeout_s``, the turn ends here with what was shown, cancelled."""
        watch = self._watch
        if watch.abandoned:
            return ABANDONED
        while True:
            try:
                return watch.saw(events.get(timeout=0.25))
            except queue.Empty:
                pass
            silent = time.monotonic() - max(self.channel.progress_at, watch.started_at)
            if silent >= self.rank_timeout_s:
                lost = self.channel.give_up(f"a rank did not answer for {silent:.0f} s")
                watch.abandoned = True
                return watch.cut_short(lost, list(self._shown_ids))

    def begin_turn(self, settings: GenerationSettings) -> GenerationSettings:
        if self.channel.lost is not None:
            raise EngineError(f"{self.channel.lost}; the model is split across ranks and "
                              "cannot answer without it: start mlxchat --hosts again")
        self._shown_ids = []
        return replace(settings, speculative="off") if settings.speculative == "auto" \
            else settings

    def opener(self, loaded: LoadedModel, live: LiveCache, settings: GenerationSettings,
               local: OpenStream) -> OpenStream:
        """Every rank samples plainly from the same seed, told to go on token by token."""
        seed = settings.seed if settings.seed is not None else random.getrandbits(31)

        def open_stream(*, tail: list[int], history: list[int], budget: int, sampler: Any,
                        processors: Any, count: Any) -> Stream:
            # ``tail``: the prompt's last tokens, or a reasoning budget's closing ones.
            def inner() -> Stream:
                mx.random.seed(seed)
                return plain_stream(loaded.model, live, tail, budget=budget, sampler=sampler,
                                    processors=processors, count=count)
            job = dict(tail=list(tail), budget=budget, seed=seed,
                       **sampling_job(settings, live.tokens))  # what precedes ``tail``
            return mirrored_stream(self.channel, job, inner, self._shown_ids)
        return open_stream

    def end_turn(self, loaded: LoadedModel, live: LiveCache, done: TurnDone) -> None:
        """A rank lost mid-turn cuts the reply short; else every rank's weights,
        KV and peak memory, for the gauges: gathered before the turn's end is
        said, so a rank that hangs here ends the turn as one lost mid-reply does."""
        if self.channel.lost is not None:
            done.stats.finish_reason = "cancelled"
            done.stats.engine_warning = (f"{self.channel.lost}: the reply was cut short "
                                         "and kept as cancelled")
            return
        try:
            self.channel.send("figures")
            rows = self.channel.gather(own_figures(loaded, live))
        except (RuntimeError, RankLost):
            return  # the channel knows the rank is lost; the next turn says so
        self._figures = [RankFigures(r, int(row["weights"]), int(row["kv"]), int(row["peak"]))
                         for r, row in enumerate(rows)]

    def gauges(self, loaded: LoadedModel) -> tuple[str, list[RankFigures]]:
        """'2 ranks · tensor · 3.1 GB each': rank 0's shard stands for every rank's."""
        return (f"{self.plan.label} · {human_bytes(loaded.info.weights_bytes)} each",
                list(self._figures))

    def release(self, worker: EngineThread) -> bool:
        """Tell the other ranks to exit; a thread stuck in a collective is left (a daemon)."""
        if self._watch.abandoned:
            return False
        if worker.alive() and self.channel.lost is None:
            try:
                worker.call(lambda: self.channel.send("close"))
            except EngineError:
                pass  # a rank is gone already: nothing to tell it
        return True


_REFUSALS = {
    "typing": (f"prefill while typing is {NOT_ACROSS_RANKS}: every rank would have to "
               "follow each keystroke's prefill"),
    "pins": (f"pinned documents are {NOT_ACROSS_RANKS}: their shared KV prefix is stored "
             "for one rank"),
    "speculation": (f"speculative decoding is {NOT_ACROSS_RANKS}: verifying proposals "
                    "would need every rank to trim in step"),
    "draft": (f"speculative decoding is {NOT_ACROSS_RANKS}: verifying proposals would need "
              "every rank to trim in step"),
    "compute_dtype": (f"changing the compute dtype is {NOT_ACROSS_RANKS}: every rank loaded "
                      "its shard in the policy's dtype; /set compute_dtype auto"),
    "switch_model": (f"switching models is {NOT_ACROSS_RANKS}: every rank loaded its shard "
                     "at start; restart with the other model"),
    "warm_up": "the ranks compute only together (the first turn warms them)",
    "compaction": (f"a compaction prepared ahead is {NOT_ACROSS_RANKS}: its second cache "
                   "would have to follow on every rank; a full window drops the oldest "
                   "messages instead"),
}


def split_engine(loaded: LoadedModel, channel: Channel, plan: ShardPlan, *,
                 rank_timeout_s: float = 30.0, **kwargs: Any) -> ChatEngine:
    """Rank 0's engine: the app's side of a model split by ``plan`` over
    ``channel``'s group (the other ranks run ``RankWorker``)."""
    return ChatEngine(loaded, ranks=SplitRanks(channel, plan, rank_timeout_s=rank_timeout_s),
                      **kwargs)


class TurnWatch:
    """What the consumer of a turn saw, to end it without the engine thread:
    its text, and the figures its events carried (the stats it keeps)."""

    def __init__(self) -> None:
        self.started_at = time.monotonic()
        self.abandoned = False
        self._text: dict[str, list[str]] = {}
        self._seen: dict[str, Any] = {}

    def begin(self, *, prompt: Sequence[int] | None, window: int, kv_bits: int | None,
              weights_bytes: int) -> None:
        """A turn starts (the ranks' silence counts from here)."""
        self.started_at, self._text = time.monotonic(), {}
        self._seen = dict(prompt_tokens=len(prompt) if prompt is not None else 0,
                          context_window=window, kv_bits=kv_bits, weights_bytes=weights_bytes)

    def saw(self, event: Any) -> Any:
        seen = self._seen
        if isinstance(event, TurnDone):
            self.started_at, self._text = time.monotonic(), {}
        elif isinstance(event, PrefillProgress):
            seen.update(prefilled_tokens=event.total, context_used=event.cached_tokens,
                        kv_bytes=event.kv_bytes)
            if event.tps is not None:
                seen["prefill_tps"] = event.tps
        elif isinstance(event, TextDelta):
            self._text.setdefault(event.part, []).append(event.text)
            seen.setdefault("ttft_s", time.monotonic() - self.started_at)
            seen.update(context_used=event.cached_tokens, kv_bytes=event.kv_bytes)
            if event.decode_tps is not None:
                seen["decode_tps"] = event.decode_tps
        return event

    def cut_short(self, lost: Exception, token_ids: list[int]) -> TurnDone:
        seen = dict(self._seen)
        if seen.get("prompt_tokens") and "prefilled_tokens" in seen:
            seen["reused_tokens"] = max(0, seen["prompt_tokens"] - seen["prefilled_tokens"])
        stats = TurnStats(finish_reason="cancelled", generated_tokens=len(token_ids),
                          total_s=time.monotonic() - self.started_at,
                          engine_warning=f"{lost}: the reply was cut short and kept as "
                                         "cancelled", **seen)
        return TurnDone(reply="".join(self._text.get("answer", [])), stats=stats,
                        token_ids=token_ids,
                        reasoning="".join(self._text.get("reasoning", [])).rstrip())
