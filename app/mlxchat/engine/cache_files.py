"""The cache on disk, as ``ChatEngine`` offers it: whole-cache snapshots, a turn's
segments, and the checkpoint of a pinned prefix (the work is ``DiskCache``'s and
``PrefixMarks``'s, run on the engine thread)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from mlxchat.chat import Message
from mlxchat.engine.events import SnapshotLoad
from mlxchat.engine.live import LiveCache
from mlxchat.engine.persist import DiskCache
from mlxchat.engine.prefix import PrefixMarks, PrefixSaved
from mlxchat.engine.segments import SegmentInfo, SegmentRef
from mlxchat.engine.worker import Bookkeeping
from mlxchat.models.info import LoadedModel


class CacheFiles:
    """``ChatEngine``'s snapshot, segment and prefix calls; every one runs on the
    engine thread through the engine's ``_call`` (or ``_refreshed``, which reads
    the gauges' figures again after)."""

    _loaded: LoadedModel
    _live: LiveCache
    _disk: DiskCache
    _marks: PrefixMarks
    _call: Callable[..., Any]
    _refreshed: Callable[[Callable[[], Any]], Any]

    def load_snapshot(self, path: Path, *, expected_checksum: str | None = None,
                      conversation: Sequence[Message] = ()) -> SnapshotLoad:
        """Make a whole-cache snapshot (a session saved before segments) the live
        cache. ``conversation`` is what it holds (for miss reasons). On rejection
        the live cache is left cold and the reason is reported by the next turn."""
        return self._refreshed(lambda: self._disk.load_snapshot(
            path, expected_checksum=expected_checksum, conversation=conversation))

    def save_segment(self, path: Path, start: int) -> SegmentInfo:
        """Write the live cache's positions from ``start`` on (a turn's new tokens)
        and the checkpoints of layers that cannot be sliced."""
        return self._call(lambda: self._disk.save_segment(path, start))

    def load_segments(self, refs: Sequence[SegmentRef], *,
                      conversation: Sequence[Message] = ()) -> SnapshotLoad:
        """Make consecutive segments the live cache. A damaged or mismatched one
        stops the restore there: the tokens before it are kept, the rest recomputed."""
        return self._refreshed(lambda: self._disk.load_segments(refs, conversation=conversation))

    def needs_restore(self, tokens: Sequence[int]) -> bool:
        """The live cache holds tokens the prompt does not, and cannot be trimmed
        back to them (a wrapped sliding window, a recurrent state)."""
        return self._call(Bookkeeping(lambda: self._disk.needs_restore(tokens)))

    def mark_prefix(self, tokens: Sequence[int] | None, path: Path | None = None) -> None:
        """Checkpoint the cache to ``path`` once it holds exactly ``tokens`` (None:
        forget the mark). A cache that holds them already is written now when
        its layers can be sliced."""
        self._call(lambda: self._marks.mark(tokens, path, self._live, self._loaded.info))

    def take_prefix(self) -> PrefixSaved | None:
        """The prefix written since the last call (or why it was not), once."""
        return self._call(self._marks.take)

