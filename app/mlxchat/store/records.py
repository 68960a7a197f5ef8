"""Records the store returns besides the shared ones in ``mlxchat.chat``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SnapshotRecord:
    """A KV-cache snapshot file of a session, as recorded in the database."""

    id: int
    session_id: int
    leaf_id: int | None
    """The message the cached conversation ends at; None if that message was deleted."""
    path: Path
    sha256: str
    """Hex digest of the file, checked before loading it."""
    token_count: int
    """Tokens held in the cache."""
    file_bytes: int
    """Size of the file."""
    mlx_lm_version: str
    """mlx-lm version that wrote it; another version recomputes instead of loading."""
    kv_bits: int | None
    created: float


@dataclass(frozen=True)
class SegmentRecord:
    """The KV of one turn's tokens ``[start, end)`` in a file, as recorded."""

    id: int
    session_id: int
    message_id: int
    """The reply whose turn wrote it; the segment belongs to every branch through it."""
    start: int
    end: int
    path: str
    """Relative to the data folder."""
    checksum: str
    """Of the whole file, computed while writing it (``engine.checksum``)."""
    file_bytes: int
    kv_bits: int | None
    token_ids: list[int]
    """The ledger tokens it holds: checked against the conversation before use."""
    created: float
    prefix_key: str | None = None
    """The stored pinned prefix it continues (the first segment of a pinned
    session starts where that prefix ends, not at 0)."""


@dataclass(frozen=True)
class BranchInfo:
    """One branch of a session: the path from a root message to ``leaf_id``."""

    leaf_id: int
    message_count: int
    """Messages from the root to the leaf, both included."""
    preview: str
    """First line of the ``diverges_at`` message, shortened."""
    updated: float
    """When the leaf was stored."""
    current: bool
    """The leaf is the session's current position (after /undo that position is
    an inner message: no branch is current then)."""
    diverges_at: int = 0
    """The first message of this branch that no other branch holds (the root when
    there is one branch)."""
    diverge_role: str = "user"
