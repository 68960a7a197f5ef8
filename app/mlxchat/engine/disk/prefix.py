"""Shared KV prefixes: the engine side.

A conversation marks the token prefix it wants kept (a pinned system part)
and the file to keep it in. The cache is checkpointed the moment it holds
exactly those tokens, however they got there (a turn's prefill or typing
prefill), so the layers that cannot be sliced (sliding windows, recurrent
state) are saved at the prefix's end, as a KV segment from position 0.
Loading a stored prefix is ``load_segments`` with that one segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mlxchat.engine.disk import segments
from mlxchat.engine.disk.checks import failure_words
from mlxchat.engine.kv import layers
from mlxchat.engine.kv.live import LiveCache
from mlxchat.models import ModelInfo


@dataclass
class PrefixMark:
    tokens: list[int]
    path: Path


@dataclass
class PrefixSaved:
    """A marked prefix written to its file, or why it was not."""

    tokens: list[int]
    info: segments.SegmentInfo | None = None
    warning: str | None = None


class PrefixMarks:
    """The marked prefix, and the one written since last asked. Engine thread only:
    each call is handed the live cache and the model it belongs to."""

    def __init__(self) -> None:
        self._mark: PrefixMark | None = None
        self._saved: PrefixSaved | None = None

    def mark(self, tokens: Sequence[int] | None, path: Path | None, live: LiveCache,
             info: ModelInfo) -> None:
        """Checkpoint the cache to ``path`` once it holds exactly ``tokens`` (None:
        forget the mark). A cache that holds them already is written now when
        its layers can be sliced."""
        self._mark = PrefixMark(list(tokens), path) if tokens and path else None
        mark = self._mark
        if (mark is not None and live.tokens[:len(mark.tokens)] == mark.tokens
                and (len(live.tokens) == len(mark.tokens)
                     or all(layers.row(c).sliceable(c) for c in live.layers))):
            self._write(live, info)

    def take(self) -> PrefixSaved | None:
        """The prefix written since the last call (or why it was not), once."""
        saved, self._saved = self._saved, None
        return saved

    def chunk(self, n: int, held: int) -> int:
        """A prefill chunk of ``n`` tokens after the ``held`` ones, cut to end
        where the marked prefix does."""
        mark = self._mark
        if mark is not None and held < len(mark.tokens) < held + n:
            return len(mark.tokens) - held
        return n

    def reached(self, live: LiveCache, info: ModelInfo) -> None:
        """After a chunk: write the mark if the cache now holds exactly it."""
        mark = self._mark
        if mark is not None and live.tokens == mark.tokens:
            self._write(live, info)

    def _write(self, live: LiveCache, info: ModelInfo) -> None:
        mark = self._mark
        assert mark is not None
        self._mark = None
        n = len(mark.tokens)
        try:
            written = segments.write(mark.path, live.layers, 0, n, mark.tokens,
                                     fingerprint=info.fingerprint,
                                     template_hash=info.chat_template_hash)
        except (OSError, RuntimeError, ValueError) as exc:
            self._saved = PrefixSaved(mark.tokens, warning=f"pinned prefix not saved: "
                                                            f"{failure_words(exc)}")
            return
        self._saved = PrefixSaved(mark.tokens, info=written)
