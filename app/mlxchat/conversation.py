"""Conversation: one open session driving one engine, shared by the CLI, the
slash commands and the UI (which only render what this reports). It owns the
session's life (``SessionLife``) and exposes the engine only as read-only views.

Durability order: a user message is committed before generation starts; the
reply is committed when it finishes or is cancelled; then the KV snapshot is
written and recorded, and only then are older snapshot files deleted.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from mlxchat.chat import GenerationSettings, Message, Session, TurnStats, attachment_block
from mlxchat.config import Settings
from mlxchat.engine import (EngineError, EngineState, Event, PrefillProgress, SnapshotLoad,
                            TextDelta, TurnDone)
from mlxchat.engine.interface import Engine
from mlxchat.errors import MlxchatError
from mlxchat.ledger import Ledger, Plan
from mlxchat.models.info import LoadedModel
from mlxchat.session_cache import SessionCache
from mlxchat.session_views import EngineViews
from mlxchat.session_speculation import Speculating
from mlxchat.session_life import SessionLife
from mlxchat.session_pins import PinnedDocs
from mlxchat.session_typing import TypingAhead, settled_text
from mlxchat.pending_reply import PendingReply, ReplyKeeper, store_unsaved
from mlxchat.session_lock import SessionLock
from mlxchat.store import SessionStore, StoreError, StoreLocked

log = logging.getLogger(__name__)

ModelLoader = Callable[[str], LoadedModel]


class ConversationError(MlxchatError):
    """A request that cannot be carried out; one line for the user."""


@dataclass
class Attachment:
    """A text file waiting to go into the next message."""

    path: Path
    text: str
    tokens: int


#: Seconds between checkpoints of a streaming reply (what a kill can lose at most).
DRAFT_INTERVAL_S = 1.0
#: A checkpoint waits at most this long for another process's lock: never stalls the stream.
DRAFT_WAIT_S = 0.05
#: How long the finished reply waits for the lock before it is retried in the background.
FIRST_SAVE_WAIT_S = 0.5
#: How long a new action waits for a pending reply to be stored before refusing.
PENDING_WAIT_S = 2.0
#: On quit, how long a pending reply may take before it is kept in a file instead.
QUIT_SAVE_WAIT_S = 10.0


class Conversation(SessionLife, SessionCache, EngineViews, TypingAhead, Speculating,
                   PinnedDocs):
    def __init__(self, *, settings: Settings, store: SessionStore, engine: Engine,
                 model_spec: str, load_model: ModelLoader | None = None,
                 session: Session | None = None, keep_snapshots: bool = True,
                 lock_wait_s: float = 0.0):
        self.settings = settings
        self.store = store
        self.engine = engine
        self.model_spec = model_spec
        self._load_model = load_model
        self._keep_snapshots = keep_snapshots
        self._call_settings: GenerationSettings | None = None
        self.attachments: list[Attachment] = []
        self.last_stats: TurnStats | None = None
        self.last_snapshot: SnapshotLoad | None = None
        self.speculation_notice: str | None = None
        """Why speculation was turned off by the last open or model switch."""
        self._lock_wait_s = lock_wait_s
        self._pending: ReplyKeeper | None = None
        self.session: Session = session or self._new_session()
        self._session_lock = self._take_lock(self.session)
        if session is not None and session.id is not None and self._session_lock is not None:
            self.reload()  # another process may have written to it while we waited
        self.recover()

    # -- sessions ----------------------------------------------------------
    def _new_session(self) -> Session:
        return self.store.create_session(self.model_spec, self.settings.system_prompt,
                                         dataclasses.replace(self.settings.generation))

    def new_session(self) -> Session:
        """Start an empty session; the engine cache stays until the next turn trims it."""
        self._require_saved()
        session = self._new_session()
        self._switch_lock(session)
        self.session = session
        self._forget_session_state()
        self.speculation_notice = self.resume_speculation()  # frees another session's draft
        return self.session

    def _take_lock(self, session: Session) -> SessionLock | None:
        if not self.store.path or session.id is None:
            return None  # a throwaway in-memory session: no other process can see it
        return SessionLock(self.store.path, session.id, wait_s=self._lock_wait_s,
                           title=session.title)

    def _switch_lock(self, session: Session) -> None:
        """Hold ``session``'s lock instead of the current one (SessionBusy changes nothing)."""
        new = self._take_lock(session)
        if self._session_lock is not None:
            self._session_lock.release()
        self._session_lock = new

    def _forget_session_state(self) -> None:
        self.attachments.clear()
        self.last_stats = None
        self.last_snapshot = None
        self.last_prefix = None
        self._call_settings = None

    def open_session(self, id_or_title: str | int) -> Session:
        """Open a saved session and restore its KV snapshot when one is usable."""
        self._require_saved()
        session = (self.store.get_session(id_or_title) if isinstance(id_or_title, int)
                   else self.store.find_session(id_or_title))
        previous = self._session_lock
        self._session_lock = self._take_lock(session) if session.id != self.session.id \
            else previous
        try:
            if session.model and session.model != self.model_spec:
                self.switch_model(session.model, resume=False)
        except BaseException:
            if self._session_lock is not previous and self._session_lock is not None:
                self._session_lock.release()
            self._session_lock = previous
            raise
        if previous is not None and previous is not self._session_lock:
            previous.release()
        self.session = session
        self._forget_session_state()
        self.recover()
        self.restore_snapshot()
        self.speculation_notice = self.resume_speculation()
        return self.session

    def recover(self) -> Message | None:
        """Store a reply a previous run could not (the database was locked), and
        one left half-written by a crash or kill, marked stopped."""
        if self.session.id is not None and store_unsaved(self.store, self.session.id):
            self.reload()
        message = self.store.recover_draft(self.session.id)
        if message is not None:
            self.reload()
        return message

    def _require_saved(self) -> None:
        """Nothing may follow a reply the database has not taken yet."""
        keeper = self._pending
        if keeper is None:
            return
        if not keeper.wait(PENDING_WAIT_S):
            raise ConversationError(
                "Your last reply is not saved yet: the session database is locked by another "
                "process. It is kept and retried; try again in a moment.")
        self._pending = None
        self.reload()
        self.save_snapshot()

    def reload(self) -> Session:
        self.session = self.store.get_session(self.session.id)
        return self.session

    # -- what the engine sees ------------------------------------------------
    @property
    def messages(self) -> list[Message]:
        """The current branch (user and assistant messages), root first."""
        return list(self.session.messages)

    @property
    def generation(self) -> GenerationSettings:
        """This call's settings when ``use_settings`` set them, else the session's."""
        return self._call_settings or self.session.settings

    def use_settings(self, settings: GenerationSettings) -> None:
        """Generation settings for the turns of this call only (not stored)."""
        settings.check()
        self._call_settings = settings

    def _with_system(self, messages: list[Message]) -> list[Message]:
        system = self.session.context_system
        return ([Message("system", system)] if system else []) + list(messages)

    def engine_messages(self, extra: list[Message] | None = None) -> list[Message]:
        return self._with_system(self.messages + (extra or []))

    # -- turns ---------------------------------------------------------------
    def compose(self, text: str) -> str:
        """The user's text with any pending attachments in front."""
        parts = [attachment_block(a.path.name, a.text) for a in self.attachments]
        return "\n\n".join(parts + [text]) if parts else text

    def send(self, text: str) -> Iterator[Event]:
        """Commit the user message, then run the turn; yields the engine's events."""
        self._require_saved()
        if not text.strip():
            raise ConversationError("Nothing to send.")
        content = self.compose(text)
        plan = self._ledger().plan_message(self.messages, content)  # refuses what cannot fit
        self._add_user(content, plan)
        self.attachments.clear()
        return self._run_turn(plan)

    def retry(self) -> Iterator[Event]:
        """Answer the last user message again, as a new branch beside the old reply."""
        self._require_saved()
        msgs = self.messages
        if not msgs:
            raise ConversationError("Nothing to retry yet.")
        if msgs[-1].role == "assistant":
            self.store.set_leaf(self.session.id, msgs[-1].parent_id)
            self.reload()
        if not self.messages or self.messages[-1].role != "user":
            raise ConversationError("The conversation does not end with a message to answer.")
        plan = self._ledger().plan_existing(self.messages)
        last = self.messages[-1]
        if plan.user_ids is not None and last.id is not None and plan.key is not None:
            self.store.set_message_ledger(last.id, plan.user_ids, plan.key, start=plan.start)
            self.reload()
        return self._run_turn(plan)

    def edit_last(self, text: str) -> Iterator[Event]:
        """Replace the last user message with ``text`` on a new branch and answer it."""
        self._require_saved()
        last = self.last_user_message()
        if last is None:
            raise ConversationError("There is no message to edit yet.")
        if not text.strip():
            raise ConversationError("The edited message is empty.")
        before = self.messages[:self.messages.index(last)]
        # Planned (and refused when it cannot fit) before anything is committed.
        plan = self._ledger().plan_message(before, text)
        self.store.set_leaf(self.session.id, last.parent_id)
        self._add_user(text, plan)
        return self._run_turn(plan)

    def _ledger(self) -> Ledger:
        return Ledger(self.engine, self.session, self.generation)

    def _add_user(self, content: str, plan: Plan) -> None:
        self.store.add_message(self.session.id, "user", content, token_ids=plan.user_ids,
                               ledger_key=plan.key, ledger_start=plan.start)
        self.reload()

    def undo(self) -> int:
        """Step back before the last user message (kept on its branch); returns
        how many messages left the current branch."""
        self._require_saved()
        last = self.last_user_message()
        if last is None:
            raise ConversationError("Nothing to undo.")
        before = len(self.messages)
        self.store.set_leaf(self.session.id, last.parent_id)
        return before - len(self.reload().messages)

    def last_user_message(self) -> Message | None:
        return next((m for m in reversed(self.messages) if m.role == "user"), None)

    def cancel(self) -> None:
        self.engine.cancel()

    def _run_turn(self, plan: Plan) -> Iterator[Event]:
        done: TurnDone | None = None
        parent = self.session.leaf_id
        pieces: list[str] = []
        thought: list[str] = []
        saved_at = time.monotonic()
        self.turns_started += 1
        self.engine.supersede_typing()  # before any engine job: a send goes first
        try:
            if self.engine.needs_restore(plan.prompt.tokens):
                # A wrapped window or recurrent state cannot be trimmed back: take
                # the branch's state at its last saved turn from disk instead.
                self.restore_snapshot()
            self._prepare_prefix(plan.prompt.tokens)
            for event in self.engine.turn(plan.prompt, self.generation):
                if isinstance(event, TurnDone):
                    done = event
                elif isinstance(event, TextDelta):
                    (pieces if event.part == "answer" else thought).append(event.text)
                    if time.monotonic() - saved_at >= DRAFT_INTERVAL_S:
                        saved_at = time.monotonic()
                        self._checkpoint(parent, "".join(pieces), "".join(thought))
                yield event
        finally:
            self._keep_prefix(done.stats if done is not None else None)
            if done is not None:
                self._finish(done, plan.key)
            elif pieces or thought:
                # The engine failed mid-reply: keep what was shown, marked stopped.
                self.store.add_message(self.session.id, "assistant", "".join(pieces),
                                       cancelled=True,
                                       reasoning="".join(thought).rstrip() or None)
                self.reload()

    def _checkpoint(self, parent: int | None, text: str, reasoning: str = "") -> None:
        try:
            with self.store.patience(DRAFT_WAIT_S):
                self.store.save_draft(self.session.id, parent, text, reasoning.rstrip())
        except StoreError as exc:  # a full disk or a locked database must not stop the reply
            log.warning("reply checkpoint not saved: %s", exc)

    def _finish(self, done: TurnDone, key: str | None) -> None:
        stats = done.stats
        self.last_stats = stats
        cancelled = stats.finish_reason == "cancelled"
        if done.reply or done.reasoning or not cancelled:
            # The reply's ledger entry is what was sampled, reasoning and end token included.
            reply = PendingReply(self.session.id, self.session.leaf_id, done.reply,
                                 stats=stats.to_dict(), cancelled=cancelled,
                                 token_ids=done.token_ids if key else None, ledger_key=key,
                                 reasoning=done.reasoning or None)
            try:
                reply.store_in(self.store, wait_s=FIRST_SAVE_WAIT_S)
            except StoreLocked:
                # Shown already: keep it and retry until the other process lets go.
                stats.save_warning = ("reply not saved yet: the session database is locked "
                                      "by another process; retrying")
                self._pending = ReplyKeeper(self.store, reply)
                return
        self.reload()
        self.save_snapshot()

    # -- settings and model --------------------------------------------------
    def set_system_prompt(self, text: str | None) -> None:
        self.session = self.store.update_system_prompt(self.session.id, text or None)

    def update_generation(self, settings: GenerationSettings) -> None:
        self.session = self.store.update_session_settings(self.session.id, settings)

    def switch_model(self, spec: str, *, resume: bool = True) -> LoadedModel:
        """Load ``spec`` in place of the model; with ``resume`` the session's
        speculation is checked against it (``speculation_notice`` says why it
        was turned off)."""
        if self._load_model is None:
            raise ConversationError("Switching models is not available here.")
        loaded = self._load_model(spec)
        self.engine.switch_model(loaded)
        self.model_spec = spec
        if self.session.id is not None:
            self.session = self.store.update_model(self.session.id, spec)
        self.speculation_notice = self.resume_speculation() if resume else None
        return loaded

    def close(self) -> None:
        self.engine.close()
        if self._session_lock is not None:
            self._session_lock.release()

    def shutdown(self) -> None:
        """On exit: stop any turn, store a pending reply (or keep it in a file the
        next open stores), drop an unused session, stop everything."""
        self.cancel()
        keeper, self._pending = self._pending, None
        if keeper is not None and not keeper.wait(QUIT_SAVE_WAIT_S):
            path = keeper.give_up()
            if path is not None:
                log.warning("the database stayed locked; the last reply is kept in %s", path)
        self.discard_if_empty()
        self.close()
        self.store.close()


# The engine's events and state are what a conversation reports: the UI takes
# them from here and never imports the engine.
__all__ = ["Attachment", "Conversation", "ConversationError", "EngineError", "EngineState",
           "Event", "PrefillProgress", "SnapshotLoad", "TextDelta", "TurnDone", "settled_text"]
