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
from typing import TYPE_CHECKING, Any, Callable, Sequence

from mlxchat.engine import layers, segments
from mlxchat.engine.snapshot import failure_words

if TYPE_CHECKING:
    from mlxchat.engine.live import LiveCache
    from mlxchat.models.info import LoadedModel


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
    """Mixed into ``ChatEngine``."""

    _loaded: LoadedModel
    _live: LiveCache
    _mark: PrefixMark | None = None
    _saved: PrefixSaved | None = None

    if TYPE_CHECKING:  # defined by ChatEngine
        def _call(self, fn: Callable[[], Any]) -> Any: ...

    def mark_prefix(self, tokens: Sequence[int] | None, path: Path | None = None) -> None:
        """Checkpoint the cache to ``path`` once it holds exactly ``tokens`` (None:
        forget the mark). A cache that holds them already is written now when
        its layers can be sliced."""
        def job() -> None:
            self._mark = PrefixMark(list(tokens), path) if tokens and path else None
            live, mark = self._live, self._mark
            if (mark is not None and live.tokens[:len(mark.tokens)] == mark.tokens
                    and (len(live.tokens) == len(mark.tokens)
                         or all(layers.row(c).sliceable(c) for c in live.layers))):
                self._write_mark()
        self._call(job)

    def take_prefix(self) -> PrefixSaved | None:
        """The prefix written since the last call (or why it was not), once."""
        def job() -> PrefixSaved | None:
            saved, self._saved = self._saved, None
            return saved
        return self._call(job)

    # -- engine thread -------------------------------------------------------------------
    def _chunk_to_mark(self, n: int) -> int:
        """A prefill chunk of ``n`` tokens cut to end where the marked prefix does."""
        mark, held = self._mark, len(self._live.tokens)
        if mark is not None and held < len(mark.tokens) < held + n:
            return len(mark.tokens) - held
        return n

    def _reach_mark(self) -> None:
        mark = self._mark
        if mark is not None and self._live.tokens == mark.tokens:
            self._write_mark()

    def _write_mark(self) -> None:
        mark, live, info = self._mark, self._live, self._loaded.info
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
