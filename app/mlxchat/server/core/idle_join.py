"""The API sessions' KV segment files joined when idle, as the app joins its
own: once a session has had no request for ``compaction.IDLE_JOIN_S`` (and
the server none for ``quiet_s``), its branch's files become one. It runs as
the engine lane's idle work, so never while a request holds a session (a
request arriving meanwhile waits for at most the one session being joined),
and under the session's lock (one open elsewhere is left to its holder). The
join itself is kill-safe (``session/compaction.py``)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from mlxchat.session import compaction
from mlxchat.session.cache_keeper import segment_refs
from mlxchat.store import SessionStore

log = logging.getLogger(__name__)

QUIET_S = 1.0
"""No join starts sooner than this after the server's last request (a client
taking turns quickly finds the lane free)."""


class IdleJoins:
    """The sessions the API used, joined once idle; ``run`` is the lane's idle work."""

    def __init__(self, store: SessionStore, *, after_s: float | None = None,
                 quiet_s: float = QUIET_S, allowed: Callable[[], bool] = lambda: True):
        self.store = store
        self.after_s = compaction.IDLE_JOIN_S if after_s is None else after_s
        self.quiet_s = min(quiet_s, self.after_s)
        self._allowed = allowed
        """False for a split model (its per-rank files are never joined)."""
        self._used: dict[int, float] = {}
        """Session -> when a request last let go of it (monotonic)."""
        self._last_request = 0.0
        self._lock = threading.Lock()
        self.joined: list[tuple[int, compaction.Compacted]] = []
        """The joins done that did something, in order (the newest 100)."""

    def used(self, session_id: int) -> float:
        """A request let go of the session: seconds until its join is due."""
        with self._lock:
            self._used[session_id] = self._last_request = time.monotonic()
        return self.after_s

    def run(self, arrived: Callable[[], bool]) -> float | None:
        """Join every session idle long enough, the longest idle first,
        stopping once a request ``arrived``; seconds until the next is due."""
        while True:
            with self._lock:
                now = time.monotonic()
                quiet_left = self._last_request + self.quiet_s - now
                due = min(self._used.items(), key=lambda kv: kv[1], default=None)
            if due is None:
                return None
            session_id, at = due
            wait = max(at + self.after_s - now, quiet_left)
            if wait > 0:
                return wait
            if arrived():
                return self.quiet_s  # after the requests, once the server is quiet again
            self._join(session_id, at)

    def _join(self, session_id: int, at: float) -> None:
        done = (compaction.compact_saved(self.store, session_id, segment_refs,
                                         holder="the API server's idle join")
                if self._allowed() else compaction.Compacted(0, 0, 0))
        with self._lock:
            if self._used.get(session_id) == at:  # not used again meanwhile
                if done is None:  # open elsewhere: asked again after another while
                    self._used[session_id] = time.monotonic()
                else:
                    del self._used[session_id]
        if done is not None and (done.joined or done.removed or done.warning):
            self.joined = [*self.joined[-99:], (session_id, done)]
            log.info("session %d idle: %d KV segment files joined into %d, %d removed%s",
                     session_id, done.joined, done.written, done.removed,
                     f" ({done.warning})" if done.warning else "")
