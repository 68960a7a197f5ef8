"""A size budget for the API sessions' KV segments on disk: when their files
pass it, the least recently used sessions lose their segments, whole
sessions at a time (their messages stay; a later turn recomputes the KV).
The session in use is never evicted: its next turn is about to use them.
Each eviction is said in the server's log, and the next turn of an evicted
session says why it recomputed (``reason_for``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from mlxchat.chat import human_bytes
from mlxchat.files import remove_files
from mlxchat.store import SessionStore

log = logging.getLogger(__name__)

REASONS_KEPT = 4096
"""Evicted sessions whose reason is kept for their next turn (the oldest go)."""


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
        self._reasons: dict[int, str] = {}
        """Evicted session -> why its next turn recomputes."""

    def enforce(self, *, in_use: int | None) -> Eviction:
        """Drop the least recently used API sessions' segments (never
        ``in_use``'s) until the rest fit the budget."""
        sessions = self.store.api.sessions_by_use()
        total = self.store.segments.total_bytes(sessions)
        out = Eviction(total, total)
        dropped: list[str] = []
        for sid in sessions:
            if out.after_bytes <= self.limit_bytes:
                break
            held = self.store.segments.session_bytes(sid) if sid != in_use else 0
            if not held:
                continue
            files = self.store.segments.drop(sid)
            remove_files(files)
            out.sessions.append(sid)
            out.files += files
            out.after_bytes = self.store.segments.total_bytes(sessions)
            dropped.append(f"#{sid} ({human_bytes(held)})")
            self._keep_reason(sid, f"its KV files were evicted at {time.strftime('%H:%M:%S')} "
                                   f"to keep --kv-budget {human_bytes(self.limit_bytes)} "
                                   "(least recently used first); the history was recomputed")
        if out.sessions:
            log.info("KV budget %s: evicted the KV files of session%s %s, least recently used "
                     "first (%s -> %s); their next turns recompute",
                     human_bytes(self.limit_bytes), "s" if len(dropped) > 1 else "",
                     ", ".join(dropped), human_bytes(out.before_bytes),
                     human_bytes(out.after_bytes))
        return out

    def reason_for(self, session_id: int) -> str | None:
        """Why ``session_id`` has no KV on disk, once: for the turn that recomputes."""
        return self._reasons.pop(session_id, None)

    def _keep_reason(self, session_id: int, reason: str) -> None:
        self._reasons.pop(session_id, None)
        self._reasons[session_id] = reason
        if len(self._reasons) > REASONS_KEPT:
            del self._reasons[next(iter(self._reasons))]
