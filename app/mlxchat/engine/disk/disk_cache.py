"""The engine's cache on disk: KV segments written and read, and whole
snapshots (sessions from before segments) read, all on the engine thread."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mlx_lm.models.cache import make_prompt_cache

from mlxchat.chat import Message
from mlxchat.engine.disk import branch_restore, segments, snapshot
from mlxchat.engine.disk.checks import CacheFileRejected
from mlxchat.engine.events import CacheLoad
from mlxchat.engine.kv import layers
from mlxchat.engine.kv.live import LiveCache
from mlxchat.models import LoadedModel


class DiskCache:
    """Moves one model's live cache to and from files. Engine thread only; a
    model switch makes a new one."""

    def __init__(self, loaded: LoadedModel, live: LiveCache):
        self._loaded, self._live = loaded, live
        info = loaded.info
        self._origin = dict(fingerprint=info.fingerprint, template_hash=info.chat_template_hash)

    def load_snapshot(self, path: Path, *, expected_checksum: str | None = None,
                      conversation: Sequence[Message] = ()) -> CacheLoad:
        """Make a saved whole cache the live one. ``conversation`` is what it
        holds (for miss reasons). On rejection the live cache is left cold and
        the reason is reported by the next turn."""
        try:
            snap = snapshot.load(path, num_layers=len(make_prompt_cache(self._loaded.model)),
                                 expected_checksum=expected_checksum, **self._origin)
        except CacheFileRejected as exc:
            self._live.reset(f"snapshot rejected: {exc}", report=True)
            return CacheLoad(ok=False, reason=str(exc))
        self._live.adopt(snap.cache, snap.tokens, conversation, "snapshot")
        return CacheLoad(ok=True, tokens=len(snap.tokens))

    def save_segment(self, path: Path, start: int,
                     end: int | None = None) -> segments.SegmentInfo:
        """Write the live cache's positions from ``start`` to ``end`` (None: on to
        its end; a turn's new tokens) and the checkpoints of layers that cannot
        be sliced."""
        live = self._live
        end = len(live.tokens) if end is None else end
        if not 0 <= start < end <= len(live.tokens):
            raise ValueError("nothing new in the KV cache to save")
        if end < len(live.tokens) and not all(layers.row(c).sliceable(c) for c in live.layers):
            raise ValueError("only layers that keep every position can be saved short of "
                             "their end")
        return segments.write(path, live.layers, start, end, live.tokens[start:end],
                              **self._origin)

    def load_segments(self, refs: Sequence[segments.SegmentRef], *,
                      conversation: Sequence[Message] = ()) -> CacheLoad:
        """Make consecutive segments the live cache. A damaged or mismatched one
        stops the restore there: the tokens before it are kept, the rest recomputed."""
        got = branch_restore.restore(self._loaded.model, refs, **self._origin)
        if got.layers is None:
            self._live.reset(f"snapshot rejected: {got.reason}", report=True)
            return CacheLoad(ok=False, reason=got.reason)
        tokens = [t for ref in refs[:got.used] for t in ref.token_ids]
        self._live.adopt(got.layers, tokens, conversation if got.reason is None else (),
                         "snapshot")
        return CacheLoad(ok=True, tokens=got.end, reason=got.reason)
