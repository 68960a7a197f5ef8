"""DistributedEngine: rank 0 of a model split over several MLX ranks.

It is a ``ChatEngine`` whose live cache and decode loop tell the other ranks
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
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from mlxchat.chat import GenerationSettings, Message, TurnStats, human_bytes
from mlxchat.engine import kv
from mlxchat.engine.channel import GO_ON, STOP, Channel, RankLost
from mlxchat.engine.core import _LIVE, ChatEngine
from mlxchat.engine.decode import Reply, decode
from mlxchat.engine.events import (EngineError, Event, PrefillProgress, RankFigures,
                                   SnapshotLoad, TextDelta, TurnDone)
from mlxchat.engine.live import LiveCache
from mlxchat.engine.rank_segments import RankDisk
from mlxchat.engine.rank_worker import own_figures
from mlxchat.engine.results import Decode
from mlxchat.engine.segments import SegmentInfo, SegmentRef
from mlxchat.engine.speculative import Stream, plain_stream
from mlxchat.engine.turn_pipeline import ABANDONED
from mlxchat.models.info import LoadedModel
from mlxchat.models.sharding import ShardPlan

NOT_ACROSS_RANKS = "not available with a model split across ranks yet"


def sampling_job(settings: GenerationSettings) -> dict[str, Any]:
    """What another rank needs to sample as rank 0 does."""
    return dict(temperature=settings.temperature, top_p=settings.top_p, min_p=settings.min_p,
                repetition_penalty=settings.repetition_penalty)


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

    def _trim_to(self, n: int) -> None:
        self.channel.send("trim", by=len(self.tokens) - n)
        super()._trim_to(n)

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


class DistributedEngine(ChatEngine):
    """Rank 0's engine: the app's side of a model split by ``plan`` over ``channel``'s group."""

    segments_per_rank = True

    def __init__(self, loaded: LoadedModel, channel: Channel, plan: ShardPlan, *,
                 rank_timeout_s: float = 30.0, **kwargs: Any):
        self.channel, self.plan = channel, plan
        self.rank_timeout_s = rank_timeout_s
        """A turn that hears nothing from the ranks this long ends, cut short."""
        self._shown_ids: list[int] = []
        self._rank_figures: list[RankFigures] = []
        self._watch = TurnWatch()
        super().__init__(loaded, **kwargs)
        self._call = self._call_unless_lost

    def _call_unless_lost(self, fn: Callable[[], Any]) -> Any:
        if self._watch.abandoned:  # the engine thread waits on a rank forever
            raise EngineError(f"{self.channel.lost}; start mlxchat --hosts again")
        return self._worker.call(fn)

    def close(self) -> None:
        """Tell the other ranks to exit, then stop the engine thread."""
        if self._watch.abandoned:
            _LIVE.discard(self)
            return  # its thread is stuck in a collective: leave it (a daemon)
        if self._worker.alive() and self.channel.lost is None:
            try:
                self._call(lambda: self.channel.send("close"))
            except EngineError:
                pass  # a rank is gone already: nothing to tell it
        super().close()

    @property
    def layout_label(self) -> str:
        """'2 ranks · tensor' for the gauges."""
        return self.plan.label

    def _rank_list(self) -> list[RankFigures]:
        return list(self._rank_figures)

    def _layout_text(self) -> str:
        """'2 ranks · tensor · 3.1 GB each': rank 0's shard stands for every rank's."""
        return f"{self.plan.label} · {human_bytes(self._loaded.info.weights_bytes)} each"

    def _new_live(self) -> LiveCache:
        return MirroredLive(self._loaded.model, self.channel)

    def warm_up(self) -> None:
        """Nothing: the ranks compute only together (the first turn warms them)."""

    # -- refused across ranks -----------------------------------------------
    def prefill(self, tokens: Sequence[int], settings: GenerationSettings, *, floor: int = 0,
                current: Callable[[], bool] = lambda: True) -> int:
        raise EngineError(f"prefill while typing is {NOT_ACROSS_RANKS}: every rank would "
                          "have to follow each keystroke's prefill")

    def mark_prefix(self, tokens: Sequence[int] | None, path: Any = None) -> None:
        if tokens is not None:
            raise EngineError(f"pinned documents are {NOT_ACROSS_RANKS}: their shared KV "
                              "prefix is stored for one rank")

    def take_prefix(self) -> None:
        return None

    def speculation_problem(self, mode: str) -> str | None:
        if mode in ("off", "auto"):
            return None
        return (f"speculative decoding is {NOT_ACROSS_RANKS}: verifying proposals would need "
                "every rank to trim in step")

    def set_draft(self, loaded: LoadedModel | None, spec: str = "") -> None:
        if loaded is not None:
            raise EngineError(self.speculation_problem("draft") or "")

    def _match_compute(self, wanted: str | None) -> None:
        if (wanted or self._loaded.info.default_compute_dtype) != self._loaded.info.compute_dtype:
            raise EngineError(f"changing the compute dtype is {NOT_ACROSS_RANKS}: every rank "
                              "loaded its shard in the policy's dtype; /set compute_dtype auto")

    def switch_model(self, loaded: LoadedModel) -> None:
        raise EngineError(f"switching models is {NOT_ACROSS_RANKS}: every rank loaded its "
                          "shard at start; restart with the other model")

    def load_snapshot(self, path: Any, *, expected_checksum: str | None = None,
                      conversation: Sequence[Message] = ()) -> SnapshotLoad:
        reason = f"a whole-cache snapshot holds one rank's cache; {NOT_ACROSS_RANKS}"
        self.drop_cache(reason)
        return SnapshotLoad(ok=False, reason=reason)

    # -- KV segments, one file per rank -------------------------------------------
    def save_segment(self, path: Path, start: int) -> SegmentInfo:
        """Every rank writes its shard of the positions from ``start`` on; rank 0's
        file is the segment's and a manifest beside it names the others."""
        if self.channel.lost is not None:
            raise OSError(str(self.channel.lost))

        def job() -> SegmentInfo:
            try:
                return self._ranks_disk().save(path, start)
            except RankLost as exc:  # said as the snapshot's warning; the reply is stored
                raise OSError(str(exc)) from None
        return self._call(job)

    def load_segments(self, refs: Sequence[SegmentRef], *,
                      conversation: Sequence[Message] = ()) -> SnapshotLoad:
        """Every rank restores its shard of the segments; a segment made on
        another layout (or that any rank cannot use) stops the restore there."""
        return self._refreshed(lambda: self._ranks_disk().load(refs, conversation))

    def _ranks_disk(self) -> RankDisk:
        return RankDisk(self._loaded, self._live, self.channel, self.plan.label)

    def kv_bytes_per_token(self, kv_bits: int | None = None) -> int:
        """This rank's share of one more token's KV (each rank probes its own)."""
        loaded = self._loaded

        def probe() -> int:
            self.channel.send("probe", bits=kv_bits, head_dim=loaded.info.head_dim)
            return kv.probe_bytes_per_token(loaded.model, kv_bits, loaded.info.head_dim)
        return self._call(probe)

    # -- the turn -------------------------------------------------------------
    def _turn(self, planned: Any, settings: GenerationSettings,
              emit: Callable[[Event], None]) -> None:
        if self.channel.lost is not None:
            raise EngineError(f"{self.channel.lost}; the model is split across ranks and "
                              "cannot answer without it: start mlxchat --hosts again")
        if settings.speculative == "auto":
            settings = replace(settings, speculative="off")
        self._shown_ids = []

        def emit_lost(event: Event) -> None:
            if isinstance(event, TurnDone) and self.channel.lost is not None:
                event.stats.finish_reason = "cancelled"
                event.stats.engine_warning = (f"{self.channel.lost}: the reply was cut short "
                                              "and kept as cancelled")
            emit(event)
        super()._turn(planned, settings, emit_lost)

    def _after_turn(self) -> None:
        """Every rank's weights, KV and peak memory, for the gauges: gathered
        before the turn's end is said, so a rank that hangs here ends the turn
        as one lost mid-reply does (what was shown is kept)."""
        if self.channel.lost is not None:
            return
        try:
            self.channel.send("figures")
            rows = self.channel.gather(own_figures(self._loaded, self._live))
        except (RuntimeError, RankLost):
            return  # the channel knows the rank is lost; the next turn says so
        self._rank_figures = [RankFigures(r, int(row["weights"]), int(row["kv"]),
                                          int(row["peak"])) for r, row in enumerate(rows)]

    def _decode(self, tokens: list[int], tail: int, reply: Reply,
                emit: Callable[[Event], None]) -> Decode:
        import mlx.core as mx

        loaded, live, settings = self._loaded, self._live, reply.settings
        fed = tokens[len(tokens) - tail:]
        seed = settings.seed if settings.seed is not None else random.getrandbits(31)

        def open_stream(*, tail: list[int], history: list[int], budget: int, sampler: Any,
                        processors: Any, count: Any) -> Stream:
            # ``tail``: the prompt's last tokens, or a reasoning budget's closing ones.
            def inner() -> Stream:
                mx.random.seed(seed)
                return plain_stream(loaded.model, live, tail, budget=budget, sampler=sampler,
                                    processors=processors, count=count)
            job = dict(tail=list(tail), budget=budget, seed=seed, **sampling_job(settings))
            return mirrored_stream(self.channel, job, inner, self._shown_ids)
        out = decode(loaded.tokenizer, live, fed, reply, emit=emit,
                     cancelled=self._worker.cancelled, open_stream=open_stream)
        if self.channel.lost is not None:
            out.finish_reason = "cancelled"
        return out

    def turn(self, conversation: Any, settings: GenerationSettings) -> Iterator[Event]:
        self._watch.begin(prompt=getattr(conversation, "tokens", None),
                          window=self.window(settings), kv_bits=settings.kv_bits,
                          weights_bytes=self._loaded.info.weights_bytes)
        return super().turn(conversation, settings)

    def _next_event(self, events: queue.Queue) -> Any:
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
