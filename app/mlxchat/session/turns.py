"""Running one planned turn: the engine's events streamed to the caller, the
reply checkpointed while it streams, then stored, then its KV segment written.

Durability order: the user message is committed before the turn starts (by
``Conversation``); the reply is committed when it finishes or is cancelled;
then the KV segment is written and recorded.
"""

from __future__ import annotations

import logging
import time
from typing import Iterator

from mlxchat.engine.events import Event, TextDelta, TurnDone
from mlxchat.engine.interface import Engine
from mlxchat.session.cache_keeper import CacheKeeper
from mlxchat.session.current import OpenSession
from mlxchat.session.ledger import Plan
from mlxchat.session.pending import PendingReply, UnsavedReplies
from mlxchat.session.pins import PinnedDocs
from mlxchat.store import SessionStore, StoreError, StoreLocked
from mlxchat.turn_stats import TurnStats

log = logging.getLogger(__name__)

#: Seconds between checkpoints of a streaming reply (what a kill can lose at most).
DRAFT_INTERVAL_S = 1.0
#: A checkpoint waits at most this long for another process's lock: never stalls the stream.
DRAFT_WAIT_S = 0.05
#: How long the finished reply waits for the lock before it is retried in the background.
FIRST_SAVE_WAIT_S = 0.5


class TurnRunner:
    """Runs the open session's turns on the engine and keeps what they said."""

    def __init__(self, open_session: OpenSession, store: SessionStore, engine: Engine, *,
                 cache: CacheKeeper, pins: PinnedDocs, unsaved: UnsavedReplies):
        self._open = open_session
        self._store = store
        self._engine = engine
        self._cache = cache
        self._pins = pins
        self._unsaved = unsaved
        self.started = 0
        """Turns started: a typing prefill planned before one is stale."""
        self.last_stats: TurnStats | None = None
        """What the last turn measured (None until one ran in this session)."""

    def run(self, plan: Plan) -> Iterator[Event]:
        """Yield the engine's events for ``plan``; the reply is stored at the end,
        or what was shown of it when the engine fails mid-reply."""
        done: TurnDone | None = None
        parent = self._open.session.leaf_id
        pieces: list[str] = []
        thought: list[str] = []
        saved_at = time.monotonic()
        self.started += 1
        self._engine.supersede_typing()  # before any engine job: a send goes first
        try:
            if (self._engine.needs_restore(plan.prompt.tokens)
                    or self._cache.worth_restoring(plan.prompt.tokens)):
                # A wrapped window or recurrent state cannot be trimmed back, or the
                # live cache holds another branch: take this branch's state at its
                # last saved turn from disk instead.
                self._cache.restore()
            self._pins.prepare(plan.prompt.tokens)
            for event in self._engine.turn(plan.prompt, self._open.generation):
                if isinstance(event, TurnDone):
                    done = event
                elif isinstance(event, TextDelta):
                    (pieces if event.part == "answer" else thought).append(event.text)
                yield event
                # Checkpointed once the caller has taken the text (shown it): a
                # kill between the two never leaves a draft holding unshown text.
                if (isinstance(event, TextDelta)
                        and time.monotonic() - saved_at >= DRAFT_INTERVAL_S):
                    saved_at = time.monotonic()
                    self._checkpoint(parent, "".join(pieces), "".join(thought))
        finally:
            self._pins.keep(done.stats if done is not None else None)
            if done is not None:
                self._finish(done, plan.key)
            elif pieces or thought:
                # The engine failed mid-reply: keep what was shown, marked stopped.
                self._store.add_message(self._open.id, "assistant", "".join(pieces),
                                        cancelled=True,
                                        reasoning="".join(thought).rstrip() or None)
                self._open.reload()

    def _checkpoint(self, parent: int | None, text: str, reasoning: str = "") -> None:
        try:
            with self._store.patience(DRAFT_WAIT_S):
                self._store.drafts.save(self._open.id, parent, text, reasoning.rstrip())
        except StoreError as exc:  # a full disk or a locked database must not stop the reply
            log.warning("reply checkpoint not saved: %s", exc)

    def _finish(self, done: TurnDone, key: str | None) -> None:
        stats = done.stats
        self.last_stats = stats
        cancelled = stats.finish_reason == "cancelled"
        if done.reply or done.reasoning or not cancelled:
            # The reply's ledger entry is what was sampled, reasoning and end token included.
            session = self._open.session
            reply = PendingReply(session.id, session.leaf_id, done.reply,
                                 stats=stats.to_dict(), cancelled=cancelled,
                                 token_ids=done.token_ids if key else None, ledger_key=key,
                                 reasoning=done.reasoning or None)
            try:
                reply.store_in(self._store, wait_s=FIRST_SAVE_WAIT_S)
            except StoreLocked:
                # Shown already: keep it and retry until the other process lets go;
                # stored, it says it was late.
                stats.save_warning = ("reply not saved yet: the session database is locked "
                                      "by another process; retrying")
                reply.stats["save_warning"] = ("stored late: the session database was locked "
                                               "by another process")
                self._unsaved.keep(reply)
                return
        stored = self._open.session.leaf_id != self._open.reload().leaf_id
        self._cache.save(stats)
        if stored and stats.snapshot_warning and self._open.session.leaf_id is not None:
            self._keep_warning(self._open.session.leaf_id, stats)

    def _keep_warning(self, reply_id: int, stats: TurnStats) -> None:
        """The segment failed after the reply was stored: say so with the reply,
        so a reopened session still shows why it recomputes."""
        try:
            self._store.set_message_stats(reply_id, stats)
        except StoreError as exc:
            log.warning("reply figures not updated: %s", exc)
