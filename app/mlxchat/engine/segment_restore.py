"""A branch's KV segments back into a live cache, checksums overlapped.

The files' checksums are computed in worker threads while MLX reads and joins
the same files on the engine thread, and checked once the cache is built: a
restore costs about the slower of the two instead of their sum. A segment
whose checksum then fails is dropped with every one after it, and the cache
is joined again from those before it (the tokens they hold are kept; the rest
is recomputed), as when a segment is refused outright.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import mlx.core as mx

from mlxchat.engine import segments
from mlxchat.engine.segments import SegmentRef, SegmentRejected


@dataclass
class Restored:
    layers: list[Any] | None
    """The cache (None when no segment could be used)."""
    end: int
    """Tokens it holds: those of the first ``used`` segments."""
    used: int
    reason: str | None
    """Why the restore stopped before the last segment, or None."""


def restore(model: Any, refs: Sequence[SegmentRef], *, fingerprint: str,
            template_hash: str) -> Restored:
    computing = segments.checksums(refs)
    pieces: list[tuple[dict, list]] = []
    reason = None
    for n, ref in enumerate(refs, 1):
        try:
            if ref.start != (refs[n - 2].end if n > 1 else 0):
                raise SegmentRejected("it does not continue the one before")
            piece = segments.read(ref, fingerprint=fingerprint, template_hash=template_hash,
                                  verify=False)
            if pieces and segments.layout(piece) != segments.layout(pieces[0]):
                raise SegmentRejected("the KV bit width changed")
        except SegmentRejected as exc:
            reason = f"segment {n} of {len(refs)}: {exc}"
            break
        pieces.append(piece)
    while pieces:
        failure, layers = None, None
        try:
            layers = segments.assemble(model, pieces, refs[len(pieces) - 1].end)
            mx.eval([c.state for c in layers])  # reads the files while the hashes run
        except Exception as exc:  # a damaged header can make shapes disagree
            failure = exc
        bad = next((i for i, (ref, checksum) in enumerate(zip(refs, computing[:len(pieces)]))
                    if checksum.result() != ref.checksum), None)
        if bad is None:
            if failure is not None:
                raise failure  # undamaged files MLX cannot join: a bug, not the user's
            return Restored(layers, refs[len(pieces) - 1].end, len(pieces), reason)
        del layers
        reason = f"segment {bad + 1} of {len(refs)}: checksum mismatch (file changed or damaged)"
        pieces = pieces[:bad]
    return Restored(None, 0, 0, reason)
