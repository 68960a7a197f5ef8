"""Conversation: one open session driving one engine, shared by the CLI, the
slash commands, the server and the UI (which only render what it reports).

Which session is open is its own: it is the ``OpenSession`` its parts read,
and it opens, leaves, forks and deletes sessions, switches the model and
closes. Everything else is a part it hands out, each given what it needs:
``turns`` (send, retry, edit, undo, tool results: planned, committed, run,
stopped), ``saved`` (the store's other sessions), ``cache`` (the KV on disk),
``pins``, ``typing`` (prefill while typing), ``compactor`` (a conversation
longer than the window), ``recall`` (what left the window brought back),
``speculation``, ``views``
(figures and token counts), ``locks``, ``retrieval``, ``tools`` (the MCP tools
it uses) and ``tool_loop`` (running a reply's calls).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Callable

from mlxchat.chat import Session
from mlxchat.config import Settings
from mlxchat.engine.interface import Engine
from mlxchat.models import LoadedModel
from mlxchat.session.cache_keeper import CacheKeeper
from mlxchat.session.compactor import Compactor
from mlxchat.session.current import OpenSession
from mlxchat.session.errors import ConversationError
from mlxchat.session.lock import SessionLocks
from mlxchat.session.pending import UnsavedReplies
from mlxchat.session.pins import PinnedDocs
from mlxchat.session.recall import Recall
from mlxchat.session.retrieval import Retrieval
from mlxchat.session.saved import Deleted, SavedSessions
from mlxchat.session.speculation import Speculation
from mlxchat.session.tool_loop import ToolLoop
from mlxchat.session.tools import SessionTools
from mlxchat.session.turns import TurnRunner
from mlxchat.session.typing_ahead import TypingAhead
from mlxchat.session.views import EngineViews
from mlxchat.store import SessionNotFound, SessionStore

if TYPE_CHECKING:
    from mlxchat.docs.embedder import Embedder
    from mlxchat.tools.host import ToolHost

log = logging.getLogger(__name__)

ModelLoader = Callable[[str], LoadedModel]

#: On quit, how long a pending reply may take before it is kept in a file instead.
QUIT_SAVE_WAIT_S = 10.0


class Conversation(OpenSession):
    def __init__(self, *, settings: Settings, store: SessionStore, engine: Engine,
                 model_spec: str, load_model: ModelLoader | None = None,
                 session: Session | None = None, keep_snapshots: bool = True,
                 lock_wait_s: float = 0.0, embedder: Callable[[], Embedder] | None = None,
                 lock_holder: str = "", tool_host: ToolHost | None = None):
        self.settings, self.engine, self.model_spec = settings, engine, model_spec
        """What it was built with (the composition root and tests read them)."""
        self.model_loader = load_model
        """How this conversation loads a model (a draft, a switch); None: it cannot."""
        super().__init__(store, session or self._new_session(store))
        self.locks = SessionLocks(store.path, wait_s=lock_wait_s, holder=lock_holder)
        self._unsaved = UnsavedReplies(store, self,
                                       stored=lambda: self.cache.save(self.turns.last_stats))
        self.cache = CacheKeeper(self, store, engine, keep_segments=keep_snapshots,
                                 writes=lambda: not store.path or self.locks.held)
        self.pins = PinnedDocs(self, store, engine, unsaved=self._unsaved)
        self.views = EngineViews(self, engine, self.pins,
                                 last_stats=lambda: self.turns.last_stats,
                                 compaction=lambda: self.compactor.status())
        self.retrieval = Retrieval(self, store, engine, window_left=self.views.window_left,
                                   prefill_seconds=self._prefill_seconds, embedder=embedder)
        self.tools = SessionTools(self, store, engine, host=tool_host)
        self.recall = Recall(self, store, engine, retrieval=self.retrieval)
        self.compactor = Compactor(self, store, engine, cache=self.cache, recall=self.recall)
        self.turns = TurnRunner(self, store, engine, cache=self.cache, pins=self.pins,
                                unsaved=self._unsaved, retrieval=self.retrieval, attachments=[],
                                compactor=self.compactor, recall=self.recall,
                                also_cancel=self.tools.cancel)
        self.typing = TypingAhead(self, engine, self.pins, attachments=self.turns.attachments,
                                  turns_started=lambda: self.turns.started)
        self.speculation = Speculation(self, engine, model_spec=lambda: self.model_spec,
                                       load_model=load_model)
        self.saved = SavedSessions(self, store)
        self.tool_loop = ToolLoop(self, store, engine, turns=self.turns, tools=self.tools)
        self.locks.hold(self.session)
        if session is not None and session.id is not None and self.locks.held:
            self.reload()  # another process may have written to it while we waited
        self._unsaved.recover()
        self.tools.start()  # in the background: ready by the time a message is sent

    # -- which session is open ----------------------------------------------------------
    def _prefill_seconds(self, tokens: int) -> float | None:
        """What ``tokens`` more at the end of the conversation take to prefill."""
        estimate = self.views.prefill_estimate(tokens)
        return None if estimate is None else estimate.seconds

    def _new_session(self, store: SessionStore | None = None) -> Session:
        return (store or self.store).create_session(
            self.model_spec, self.settings.system_prompt,
            dataclasses.replace(self.settings.generation))

    def _opened(self, session: Session) -> None:
        self.switch_to(session)
        self.turns.attachments.clear()
        self.turns.last_stats = None
        self.compactor.forget()
        self.cache.forget()
        self.pins.forget()
        self.tools.start()

    def new_session(self, *, join_left: bool = True) -> Session:
        """Start an empty session; the engine cache stays until the next turn trims it.
        ``join_left``: join the files of the session left (the API server joins
        its sessions when idle instead, never in a request's time)."""
        self._unsaved.require_saved()
        if join_left:
            self.cache.compact()  # the session left behind is idle now
        self._leave_if_empty()
        session = self._new_session()
        self.locks.switch(session)
        self._opened(session)
        self.speculation.resume()  # frees another session's draft
        return self.session

    def open_session(self, id_or_title: str | int, *,
                     prepare: Callable[[int], None] | None = None,
                     join_left: bool = True) -> Session:
        """Open a saved session and restore its KV cache when it is usable.
        ``prepare(id)`` writes to it once its lock is held, before it is read
        (the API server places its leaf); ``join_left`` as for ``new_session``."""
        self._unsaved.require_saved()
        session = (self.store.get_session(id_or_title) if isinstance(id_or_title, int)
                   else self.store.find_session(id_or_title))
        if join_left and session.id != self.session.id:
            self.cache.compact()  # the session left behind is idle now
        with self.locks.switching(session):  # SessionBusy, or a failed load: nothing changes
            if prepare is not None and session.id is not None:
                prepare(session.id)
                session = self.store.get_session(session.id)
            if session.model and session.model != self.model_spec:
                self.switch_model(session.model, resume=False)
            if session.id != self.session.id:
                self._leave_if_empty()
        self._opened(session)
        self._unsaved.recover()
        self.cache.restore()
        self.speculation.resume()
        return self.session

    def _leave_if_empty(self) -> None:
        """The session being left goes when nothing was written to it, as at quit
        (else each ctrl+n leaves a 'New chat' row behind); only under its lock."""
        if self.locks.held:
            self.saved.discard_if_empty()

    def check_free(self, session_id: int) -> None:
        """SessionBusy when another holder has that session now."""
        self.locks.probe(self.store.get_session(session_id))

    def hold_session(self) -> None:
        """Take the open session's lock again after ``locks.release()`` (the API
        server between requests; SessionBusy while another holder has it) and
        read what was written meanwhile; one deleted meanwhile is replaced."""
        if self.locks.held or self.session.id is None:
            return
        try:
            self.store.get_session(self.session.id)
        except SessionNotFound:
            session = self._new_session()
            self.locks.hold(session)
            return self._opened(session)
        self.locks.hold(self.session)
        self.reload()
        self._unsaved.recover()

    def delete_session(self, session_id: int | None = None) -> Deleted:
        """Delete a session, every branch and its KV files. Deleting the open
        one drops the live cache and opens a new empty session."""
        done = self.saved.delete(session_id)
        if done.session_id == self.session.id:
            self.engine.drop_cache("session deleted")
            done.replacement = self.new_session()
        return done

    def fork(self) -> tuple[Session, Session]:
        """Copy the open branch into a new session and open it: (source, copy)."""
        source, copy = self.session, self.saved.fork()
        assert copy.id is not None
        self.open_session(copy.id)
        return source, copy

    # -- the model, and the end ---------------------------------------------------------
    def set_system_prompt(self, text: str | None) -> None:
        self.session = self.store.update_system_prompt(self.session.id, text or None)

    def switch_model(self, spec: str, *, resume: bool = True) -> LoadedModel:
        """Load ``spec`` in place of the model; with ``resume`` the session's
        speculation is checked against it (``speculation.notice`` says why it
        was turned off)."""
        if self.model_loader is None:
            raise ConversationError("Switching models is not available here.")
        loaded = self.model_loader(spec)
        self.engine.switch_model(loaded)
        self.model_spec = spec
        if self.turns.images:
            self.turns.encode_images()  # the pending images, for this model
        if self.session.id is not None:
            self.session = self.store.update_model(self.session.id, spec)
        if resume:
            self.speculation.resume()
        return loaded

    def close(self, *, compact: bool = True) -> None:
        """Join the open branch's KV segment files (unless ``compact`` is False),
        stop the engine, let go of the session."""
        self.compactor.pause()
        if compact:
            self.cache.compact()
        self.retrieval.close()
        self.engine.close()
        self.locks.release()

    def shutdown(self) -> None:
        """On exit: stop any turn, store a pending reply (or keep it in a file the
        next open stores), drop an unused session, stop everything."""
        self.turns.cancel()  # and a tool call, a consent dialog
        if not self._unsaved.wait(QUIT_SAVE_WAIT_S):
            path = self._unsaved.give_up()
            if path is not None:
                log.warning("the database stayed locked; the last reply is kept in %s", path)
        self.saved.discard_if_empty()
        self.close()
        self.store.close()
