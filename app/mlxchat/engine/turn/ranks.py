"""The ranks a model computes on, as the engine sees them: what differs between
a model in this process (``OneProcess``) and one split over several MLX ranks
(``engine/distributed/split.py``'s ``SplitRanks``), in one object the engine
and its turn ask. Everything else about a turn is the same code for both."""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from mlxchat.chat import Message
from mlxchat.engine.disk.disk_cache import DiskCache
from mlxchat.engine.disk.segments import SegmentInfo, SegmentRef
from mlxchat.engine.events import CacheLoad, RankFigures, TurnDone
from mlxchat.engine.kv import prompt_cache
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.thread.handoff import EventBox
from mlxchat.engine.thread.worker import EngineThread
from mlxchat.engine.turn.decode import OpenStream
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel

#: What ``Ranks.refusal`` is asked about.
FEATURES = ("typing", "pins", "speculation", "draft", "compute_dtype", "switch_model",
            "warm_up", "compaction")


class CacheDisk(Protocol):
    """Moves one model's live cache to and from files (engine thread only)."""

    def save_segment(self, path: Any, start: int, end: int | None = None) -> SegmentInfo: ...

    def load_segments(self, refs: Sequence[SegmentRef], *,
                      conversation: Sequence[Message] = ()) -> CacheLoad: ...

    def load_snapshot(self, path: Any, *, expected_checksum: str | None = None,
                      conversation: Sequence[Message] = ()) -> CacheLoad: ...


class Ranks(Protocol):
    segments_per_rank: bool
    """Each rank writes its own shard of a segment: a branch's files are not
    joined (a join would split them from their ranks)."""

    def check(self) -> None:
        """Caller's thread, before any job: EngineError when the ranks can no
        longer answer."""

    def refusal(self, feature: str, mode: str = "") -> str | None:
        """Why ``feature`` (one of FEATURES; ``mode`` for speculation) cannot
        run on these ranks, or None."""

    def new_live(self, model: Any) -> LiveCache: ...

    def disk(self, loaded: LoadedModel, live: LiveCache) -> CacheDisk: ...

    def probe_bytes_per_token(self, loaded: LoadedModel, kv_bits: int | None) -> int:
        """Engine thread: what one more token adds to this rank's KV cache."""

    def watch_turn(self, planned: Any, settings: GenerationSettings, loaded: LoadedModel,
                   window: int) -> None:
        """Caller's thread, as a turn is asked for (``planned``: its messages, or its
        fitted prompt)."""

    def next_event(self, events: EventBox) -> Any:
        """Caller's thread: the turn's next event (or ``ABANDONED``)."""

    def begin_turn(self, settings: GenerationSettings) -> GenerationSettings:
        """Engine thread, first: the settings the turn runs under (EngineError
        to refuse it)."""

    def opener(self, loaded: LoadedModel, live: LiveCache, settings: GenerationSettings,
               local: OpenStream) -> OpenStream:
        """How the reply's token stream is opened (``local``: in this process)."""

    def end_turn(self, loaded: LoadedModel, live: LiveCache, done: TurnDone) -> None:
        """Engine thread, before the turn's end is said."""

    def gauges(self, loaded: LoadedModel) -> tuple[str, list[RankFigures]]:
        """How the model is split, in words ('' on one rank), and each rank's figures."""

    def release(self, worker: EngineThread) -> bool:
        """At close: tell the ranks; False leaves the engine thread as it is
        (stuck in a collective for good)."""


class OneProcess:
    """A model in this process: nothing refused, nothing to tell anyone."""

    segments_per_rank = False

    def check(self) -> None:
        return None

    def refusal(self, feature: str, mode: str = "") -> str | None:
        return None

    def new_live(self, model: Any) -> LiveCache:
        return LiveCache(model)

    def disk(self, loaded: LoadedModel, live: LiveCache) -> CacheDisk:
        return DiskCache(loaded, live)

    def probe_bytes_per_token(self, loaded: LoadedModel, kv_bits: int | None) -> int:
        return prompt_cache.probe_bytes_per_token(loaded.model, kv_bits, loaded.info.head_dim)

    def watch_turn(self, planned: Any, settings: GenerationSettings, loaded: LoadedModel,
                   window: int) -> None:
        return None

    def next_event(self, events: EventBox) -> Any:
        return events.get()

    def begin_turn(self, settings: GenerationSettings) -> GenerationSettings:
        return settings

    def opener(self, loaded: LoadedModel, live: LiveCache, settings: GenerationSettings,
               local: OpenStream) -> OpenStream:
        return local

    def end_turn(self, loaded: LoadedModel, live: LiveCache, done: TurnDone) -> None:
        return None

    def gauges(self, loaded: LoadedModel) -> tuple[str, list[RankFigures]]:
        return "", []

    def release(self, worker: EngineThread) -> bool:
        return True

