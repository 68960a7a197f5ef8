"""Conversation: one open session driving one engine, shared by the CLI, the
slash commands and the UI (which only render what this reports).

It is the face of the conversation layer: the turn (send, retry, edit, undo)
and which session is open are its own; everything else is done by the parts it
holds, each handed what it needs: ``OpenSession`` (the one place the open
session is assigned), ``TurnRunner``, ``CacheKeeper`` (the KV on disk),
``PinnedDocs``, ``TypingAhead``, ``Speculation``, ``SavedSessions``,
``EngineViews``, ``UnsavedReplies``, ``SessionLocks`` and ``Retrieval`` (the
session's document collection, used by commands and the UI as
``conversation.retrieval``). Commands and the UI call only the methods below.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from mlxchat.chat import Attachment, Message, Pin, Session, SessionSummary
from mlxchat.config import Settings
from mlxchat.engine.events import EngineState, Event, SnapshotLoad
from mlxchat.engine.interface import Engine
from mlxchat.engine.speculative.auto import VerifyCost
from mlxchat.errors import MlxchatError
from mlxchat.generation import GenerationSettings
from mlxchat.models.info import LoadedModel, ModelInfo
from mlxchat.models.tools import CallStream
from mlxchat.session.cache_keeper import CacheKeeper, CacheOnDisk
from mlxchat.session.compaction import Compacted
from mlxchat.session.current import OpenSession
from mlxchat.session.ledger import Plan
from mlxchat.session.lock import SessionLocks
from mlxchat.session.pending import UnsavedReplies, store_unsaved
from mlxchat.session.pins import PinnedDocs, PinView, PrefixUse
from mlxchat.session.retrieval import Retrieval, Retrieved
from mlxchat.session.saved import Deleted, SavedSessions
from mlxchat.session.speculation import Speculation
from mlxchat.session.turns import TurnRunner
from mlxchat.session.typing_ahead import TypingAhead
from mlxchat.session.views import ContextCosts, EngineViews
from mlxchat.sources import Source, with_sources, without_sources
from mlxchat.store import BranchInfo, SessionNotFound, SessionStore, SnapshotRecord
from mlxchat.store.export import ExportFormat
from mlxchat.turn_stats import TurnStats

if TYPE_CHECKING:
    from mlxchat.docs.embedder import Embedder

log = logging.getLogger(__name__)

ModelLoader = Callable[[str], LoadedModel]


class ConversationError(MlxchatError):
    """A request that cannot be carried out; one line for the user."""


#: How long a new action waits for a pending reply to be stored before refusing.
PENDING_WAIT_S = 2.0
#: On quit, how long a pending reply may take before it is kept in a file instead.
QUIT_SAVE_WAIT_S = 10.0


class Conversation:
    def __init__(self, *, settings: Settings, store: SessionStore, engine: Engine,
                 model_spec: str, load_model: ModelLoader | None = None,
                 session: Session | None = None, keep_snapshots: bool = True,
                 lock_wait_s: float = 0.0, embedder: Callable[[], Embedder] | None = None,
                 lock_holder: str = ""):
        self.settings = settings
        self.store = store
        self.engine = engine
        self.model_spec = model_spec
        self._load_model = load_model
        self.attachments: list[Attachment] = []
        self.speculation_notice: str | None = None
        """Why speculation was turned off by the last open or model switch."""
        self._open = OpenSession(store, session or self._new_session())
        self._locks = SessionLocks(store.path, wait_s=lock_wait_s, holder=lock_holder)
        self._unsaved = UnsavedReplies(store)
        self._cache = CacheKeeper(self._open, store, engine, keep_segments=keep_snapshots)
        self._pins = PinnedDocs(self._open, store, engine)
        self._turns = TurnRunner(self._open, store, engine, cache=self._cache, pins=self._pins,
                                 unsaved=self._unsaved)
        self._typing = TypingAhead(self._open, engine, self._pins, attachments=self.attachments,
                                   turns_started=lambda: self._turns.started)
        self._speculation = Speculation(self._open, engine, model_spec=lambda: self.model_spec,
                                        load_model=load_model)
        self._saved = SavedSessions(self._open, store)
        self._views = EngineViews(self._open, engine, self._pins,
                                  last_stats=lambda: self._turns.last_stats)
        self.retrieval = Retrieval(self._open, store, engine, window_left=self.window_left,
                                   last_stats=self.branch_stats, embedder=embedder)
        self._locks.hold(self.session)
        if session is not None and session.id is not None and self._locks.held:
            self.reload()  # another process may have written to it while we waited
        self.recover()

    # -- the open session --------------------------------------------------------
    @property
    def session(self) -> Session:
        return self._open.session

    @session.setter
    def session(self, session: Session) -> None:
        self._open.session = session

    def _new_session(self) -> Session:
        return self.store.create_session(self.model_spec, self.settings.system_prompt,
                                         dataclasses.replace(self.settings.generation))

    def _switch_to(self, session: Session) -> None:
        self._open.switch_to(session)
        self.attachments.clear()
        self._turns.last_stats = None
        self._cache.forget()
        self._pins.forget()

    def new_session(self) -> Session:
        """Start an empty session; the engine cache stays until the next turn trims it."""
        self._require_saved()
        self.compact_cache()  # the session left behind is idle now
        self._leave_if_empty()
        session = self._new_session()
        self._locks.switch(session)
        self._switch_to(session)
        self.speculation_notice = self.resume_speculation()  # frees another session's draft
        return self.session

    def open_session(self, id_or_title: str | int, *,
                     prepare: Callable[[int], None] | None = None) -> Session:
        """Open a saved session and restore its KV snapshot when one is usable.
        ``prepare(id)`` writes to it once its lock is held, before it is read
        (the API server places its leaf)."""
        self._require_saved()
        session = (self.store.get_session(id_or_title) if isinstance(id_or_title, int)
                   else self.store.find_session(id_or_title))
        if session.id != self.session.id:
            self.compact_cache()  # the session left behind is idle now
        with self._locks.switching(session):  # SessionBusy, or a failed load: nothing changes
            if prepare is not None and session.id is not None:
                prepare(session.id)
                session = self.store.get_session(session.id)
            if session.model and session.model != self.model_spec:
                self.switch_model(session.model, resume=False)
            if session.id != self.session.id:
                self._leave_if_empty()
        self._switch_to(session)
        self.recover()
        self.restore_snapshot()
        self.speculation_notice = self.resume_speculation()
        return self.session

    def _leave_if_empty(self) -> None:
        """The session being left goes when nothing was written to it, as at quit
        (else each ctrl+n leaves a 'New chat' row behind); only under its lock."""
        if self._locks.held:
            self.discard_if_empty()

    def let_go_session(self) -> None:
        """Release the open session's lock while idle (the API server between
        requests), so the chat or another process may open it meanwhile."""
        self._locks.release()

    def check_free(self, session_id: int) -> None:
        """SessionBusy when another holder has that session now."""
        self._locks.probe(self.store.get_session(session_id))

    def hold_session(self) -> None:
        """Take the open session's lock again after ``let_go_session``
        (SessionBusy while another holder has it) and read what was written
        meanwhile; a session deleted meanwhile is replaced by a new one."""
        if self._locks.held or self.session.id is None:
            return
        try:
            self.store.get_session(self.session.id)
        except SessionNotFound:
            session = self._new_session()
            self._locks.hold(session)
            self._switch_to(session)
            return
        self._locks.hold(self.session)
        self.reload()
        self.recover()

    def recover(self) -> Message | None:
        """Store a reply a previous run could not (the database was locked), and
        one left half-written by a crash or kill, marked stopped."""
        if self.session.id is not None and store_unsaved(self.store, self.session.id):
            self.reload()
        message = self.store.drafts.recover(self.session.id)
        if message is not None:
            self.reload()
        return message

    def _require_saved(self) -> None:
        """Nothing may follow a reply the database has not taken yet."""
        if not self._unsaved.waiting:
            return
        if not self._unsaved.wait(PENDING_WAIT_S):
            raise ConversationError(
                "Your last reply is not saved yet: the session database is locked by another "
                "process. It is kept and retried; try again in a moment.")
        self.reload()
        self.save_snapshot()

    def reload(self) -> Session:
        return self._open.reload()

    @property
    def messages(self) -> list[Message]:
        """The current branch (user and assistant messages), root first."""
        return self._open.messages

    @property
    def generation(self) -> GenerationSettings:
        """This call's settings when ``use_settings`` set them, else the session's."""
        return self._open.generation

    def use_settings(self, settings: GenerationSettings, *, tools: str | None = None) -> None:
        """Generation settings (and tools for the template, canonical JSON) for
        the turns of this call only (not stored)."""
        self._open.use_settings(settings, tools=tools)

    def engine_messages(self, extra: list[Message] | None = None) -> list[Message]:
        return self._open.with_system(self.messages + (extra or []))

    # -- turns -----------------------------------------------------------------------
    def compose(self, text: str) -> str:
        """The user's text with any pending attachments in front."""
        parts = [a.block for a in self.attachments]
        return "\n\n".join(parts + [text]) if parts else text

    def send(self, text: str) -> Iterator[Event]:
        """Commit the user message (with what it retrieved from the session's
        collection in front: ``retrieval.last``), then run the turn; yields the
        engine's events. Nothing is prefilled until the first event is asked for."""
        self._require_saved()
        if not text.strip():
            raise ConversationError("Nothing to send.")
        content, sources = self._with_retrieved(text, self.compose(text))
        plan = self._open.ledger(self.engine).plan_message(self.messages, content)
        # The plan refused what cannot fit: nothing stored then.
        self._add_user(content, plan, sources)
        self.attachments.clear()
        return self._turns.run(plan)

    def _with_retrieved(self, query: str, content: str) -> tuple[str, list[Source] | None]:
        self.retrieval.last = None
        found: Retrieved | None = self.retrieval.retrieve(query, message=content)
        if found is None or not found.sources:
            return content, None
        return with_sources(found.collection, found.sources, content), found.sources

    def send_results(self, results: list[Message]) -> Iterator[Event]:
        """Commit tool results (role ``tool``) after the last reply, then run
        the turn that reads them. The first result holds the ids they add
        together; a later one adds none of its own."""
        self._require_saved()
        if not results or any(r.role != "tool" for r in results):
            raise ConversationError("Tool results need at least one message of role 'tool'.")
        plan = self._open.ledger(self.engine).plan_results(self.messages, results)
        self.store.add_messages(self.session.id, [  # all or none: the first holds all ids
            Message("tool", r.content, token_ids=plan.user_ids if i == 0 or plan.user_ids is None
                    else [], ledger_key=plan.key, ledger_start=plan.start and i == 0,
                    tool_call_id=r.tool_call_id, tool_name=r.tool_name)
            for i, r in enumerate(results)])
        self.reload()
        return self._turns.run(plan)

    def retry(self) -> Iterator[Event]:
        """Answer the last user message again, as a new branch beside the old reply."""
        self._require_saved()
        msgs = self.messages
        if not msgs:
            raise ConversationError("Nothing to retry yet.")
        if msgs[-1].role == "assistant":
            self.store.branches.set_leaf(self.session.id, msgs[-1].parent_id)
            self.reload()
        if not self.messages or self.messages[-1].role not in ("user", "tool"):
            raise ConversationError("The conversation does not end with a message to answer.")
        plan = self._open.ledger(self.engine).plan_existing(self.messages)
        last = self.messages[-1]
        if plan.user_ids is not None and last.id is not None and plan.key is not None:
            self.store.set_message_ledger(last.id, plan.user_ids, plan.key, start=plan.start)
            self.reload()
        return self._turns.run(plan)

    def edit_last(self, text: str) -> Iterator[Event]:
        """Replace the last user message with ``text`` on a new branch and answer it."""
        self._require_saved()
        last = self.last_user_message()
        if last is None:
            raise ConversationError("There is no message to edit yet.")
        text = without_sources(text)  # an edit of a message that retrieved retrieves anew
        if not text.strip():
            raise ConversationError("The edited message is empty.")
        before = self.messages[:self.messages.index(last)]
        content, sources = self._with_retrieved(text, text)
        # Planned (and refused when it cannot fit) before anything is committed.
        plan = self._open.ledger(self.engine).plan_message(before, content)
        self.store.branches.set_leaf(self.session.id, last.parent_id)
        self._add_user(content, plan, sources)
        return self._turns.run(plan)

    def _add_user(self, content: str, plan: Plan, sources: list[Source] | None = None) -> None:
        self.store.add_message(self.session.id, "user", content, token_ids=plan.user_ids,
                               ledger_key=plan.key, ledger_start=plan.start, sources=sources)
        self.reload()

    def undo(self) -> int:
        """Step back before the last user message (kept on its branch); returns
        how many messages left the current branch."""
        self._require_saved()
        last = self.last_user_message()
        if last is None:
            raise ConversationError("Nothing to undo.")
        before = len(self.messages)
        self.store.branches.set_leaf(self.session.id, last.parent_id)
        return before - len(self.reload().messages)

    def last_user_message(self) -> Message | None:
        return next((m for m in reversed(self.messages) if m.role == "user"), None)

    def last_user_text(self) -> str | None:
        """What the user typed in the last message, its sources taken off:
        what an edit starts from."""
        last = self.last_user_message()
        return None if last is None else without_sources(last.content)

    def cancel(self) -> None:
        self.engine.cancel()

    @property
    def last_stats(self) -> TurnStats | None:
        """What the last turn of the open session measured (None: none ran yet)."""
        return self._turns.last_stats

    # -- settings and model ------------------------------------------------------------
    def set_system_prompt(self, text: str | None) -> None:
        self.session = self.store.update_system_prompt(self.session.id, text or None)

    def update_generation(self, settings: GenerationSettings) -> None:
        self._open.update_generation(settings)

    @property
    def model_loader(self) -> ModelLoader | None:
        """How this conversation loads a model (a draft, a switch); None: it cannot."""
        return self._load_model

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

    def close(self, *, compact: bool = True) -> None:
        """Join the open branch's KV segment files (unless ``compact`` is False),
        stop the engine, let go of the session."""
        if compact:
            self.compact_cache()
        self.retrieval.close()
        self.engine.close()
        self._locks.release()

    def shutdown(self) -> None:
        """On exit: stop any turn, store a pending reply (or keep it in a file the
        next open stores), drop an unused session, stop everything."""
        self.cancel()
        if not self._unsaved.wait(QUIT_SAVE_WAIT_S):
            path = self._unsaved.give_up()
            if path is not None:
                log.warning("the database stayed locked; the last reply is kept in %s", path)
        self.discard_if_empty()
        self.close()
        self.store.close()

    # -- saved sessions (SavedSessions) ----------------------------------------------------
    def list_sessions(self, *, limit: int = 100, search: str | None = None
                      ) -> list[SessionSummary]:
        return self._saved.list(limit=limit, search=search)

    def find_session(self, id_or_title: str) -> Session:
        return self._saved.find(id_or_title)

    def branches(self) -> list[BranchInfo]:
        return self._saved.branches()

    def snapshot_record(self, session_id: int | None = None) -> SnapshotRecord | None:
        return self._saved.snapshot_record(session_id)

    def leaves_holding(self, message_id: int) -> list[int]:
        return self._saved.leaves_holding(message_id)

    def rename(self, title: str, session_id: int | None = None) -> Session:
        return self._saved.rename(title, session_id)

    def delete_session(self, session_id: int | None = None) -> Deleted:
        """Delete a session, every branch and its snapshot files. Deleting the
        open one drops the live cache and opens a new empty session."""
        done = self._saved.delete(session_id)
        if done.session_id == self.session.id:
            self.engine.drop_cache("session deleted")
            done.replacement = self.new_session()
        return done

    def fork(self) -> tuple[Session, Session]:
        """Copy the open branch into a new session and open it: (source, copy)."""
        source = self.session
        copy = self._saved.fork()
        assert copy.id is not None
        self.open_session(copy.id)
        return source, copy

    def switch_branch(self, leaf_id: int) -> Session:
        return self._saved.switch_branch(leaf_id)

    def export(self, fmt: ExportFormat, dest: str | None, *, base_dir: Path) -> Path:
        return self._saved.export(fmt, dest, base_dir=base_dir)

    def import_file(self, path: Path) -> Session:
        return self._saved.import_file(path)

    def discard_if_empty(self) -> bool:
        return self._saved.discard_if_empty()

    # -- the KV cache on disk (CacheKeeper) -------------------------------------------------
    @property
    def last_snapshot(self) -> SnapshotLoad | None:
        """What restoring the session's KV from disk found when it was opened."""
        return self._cache.last_load

    def snapshot_words(self) -> str:
        return self._cache.snapshot_words()

    def restore_snapshot(self) -> SnapshotLoad | None:
        return self._cache.restore()

    def save_snapshot(self) -> Path | None:
        return self._cache.save(self.last_stats)

    def drop_snapshot(self) -> int:
        return self._cache.drop()

    def compact_cache(self) -> Compacted | None:
        """Join the open branch's KV segment files into one (also done on close
        and when another session is opened); cheap when there is nothing to do."""
        if self.store.path and not self._locks.held:
            return None  # another process writes this session's files
        return self._cache.compact()

    def cache_on_disk(self) -> CacheOnDisk:
        return self._cache.on_disk()

    # -- pinned documents (PinnedDocs) ---------------------------------------------------
    @property
    def last_prefix(self) -> PrefixUse | None:
        return self._pins.last_prefix

    def pin(self, path: Path, text: str) -> Pin:
        self._require_saved()
        return self._pins.pin(path, text)

    def unpin(self, name: str) -> list[Pin]:
        self._require_saved()
        return self._pins.unpin(name)

    def pins(self) -> list[PinView]:
        return self._pins.pins()

    def prefix_tokens(self) -> list[int]:
        return self._pins.prefix_tokens()

    # -- typing prefill (TypingAhead) ---------------------------------------------------
    def typed_tokens(self, text: str) -> list[int] | None:
        return self._typing.typed_tokens(text)

    def prefill_typed(self, text: str) -> int:
        return self._typing.prefill_typed(text)

    # -- speculative decoding (Speculation) ------------------------------------------------
    def verify_cost(self) -> VerifyCost | None:
        return self._speculation.verify_cost()

    def draft_name(self) -> str | None:
        return self._speculation.draft_name()

    def paired_draft_hint(self) -> str | None:
        return self._speculation.paired_draft_hint()

    def paired_draft(self) -> str:
        return self._speculation.paired_draft()

    def set_draft(self, spec: str | None) -> str | None:
        return self._speculation.set_draft(spec)

    def set_speculative(self, mode: str) -> None:
        self._speculation.set_speculative(mode)

    def resume_speculation(self) -> str | None:
        return self._speculation.resume()

    # -- read-only views of the engine (EngineViews) ----------------------------------------
    @property
    def model_info(self) -> ModelInfo:
        return self._views.model_info

    @property
    def context_window(self) -> int:
        return self._views.context_window

    def state(self) -> EngineState:
        return self._views.state()

    def branch_stats(self) -> TurnStats | None:
        return self._views.branch_stats()

    def count_tokens(self, messages: list[Message]) -> int:
        return self._views.count_tokens(messages)

    def message_tokens(self, messages: list[Message]) -> list[int]:
        return self._views.message_tokens(messages)

    def context_costs(self) -> ContextCosts:
        return self._views.context_costs()

    def display_text(self, content: str) -> str:
        return self._views.display_text(content)

    def reply_stream(self) -> CallStream:
        return self._views.reply_stream()

    def kv_bytes_per_token(self) -> int:
        return self._views.kv_bytes_per_token()

    def ledger_note(self) -> str | None:
        return self._views.ledger_note()

    def window_left(self) -> int:
        return self._views.window_left()
