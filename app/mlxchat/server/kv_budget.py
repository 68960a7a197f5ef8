"""A size budget for the API sessions' KV segments on disk: when their files
pass it, the least recently used sessions lose their segments, whole
sessions at a time (their messages stay; a later turn recomputes the KV).
The session in use is never evicted: its next turn is about to use them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from mlxchat.files import remove_files
from mlxchat.store import SessionStore

log = logging.getLogger(__name__)


@dataclass
class Eviction:
    """What one check of the budget did."""

    before_bytes: int
    after_bytes: int
    sessions: list[int] = field(default_factory=list)
    """Sessions whose segments were dropped, least recently used first."""
    files: list[Path] = field(default_factory=list)
    """The segment files deleted."""


class KvBudget:
    """Keeps the API sessions' segment files at most ``limit_bytes``."""

    def __init__(self, store: SessionStore, limit_bytes: int):
        if limit_bytes < 0:
            raise ValueError("a KV budget must be 0 bytes or more")
        self.store = store
        self.limit_bytes = limit_bytes

    def enforce(self, *, in_use: int | None) -> Eviction:
        """Drop the least recently used API sessions' segments (never
        ``in_use``'s) until the rest fit the budget."""
        sessions = self.store.api.sessions_by_use()
        total = self.store.segments.total_bytes(sessions)
        out = Eviction(total, total)
        for sid in sessions:
            if out.after_bytes <= self.limit_bytes:
                break
            if sid == in_use or not self.store.segments.session_bytes(sid):
                continue
            files = self.store.segments.drop(sid)
            remove_files(files)
            out.sessions.append(sid)
            out.files += files
            out.after_bytes = self.store.segments.total_bytes(sessions)
        if out.sessions:
            log.info("KV budget: dropped the segments of %d sessions (%d -> %d bytes)",
                     len(out.sessions), out.before_bytes, out.after_bytes)
        return out
