"""Turns for clients of the HTTP API, who send the whole conversation every
time: the request finds the stored branch it extends, that branch's KV comes
back from its segments (or stays warm), and only what is new is prefilled.

Every message the API sees is indexed by the hash of the conversation up to
and including it (``chain_hashes``); the lookup is one query over the
request's hashes, with no rendering of history. A request that extends no
stored branch starts a session, with the earlier messages stored as given;
their first turn renders them once and starts a token ledger. API sessions
are ordinary sessions: listed, titled from their first message, openable.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from mlxchat.chat import CalledTool, ImageRef, Message, Role, Session
from mlxchat.engine.events import Event, TurnDone
from mlxchat.engine.turn.constrained import CompiledFormat
from mlxchat.engine.turn.reply_options import ASKS_NOTHING, ReplyOptions
from mlxchat.errors import MlxchatError
from mlxchat.generation import GenerationSettings
from mlxchat.server.core import images
from mlxchat.server.core.images import ImageBlob
from mlxchat.session.conversation import Conversation
from mlxchat.session.errors import ConversationError
from mlxchat.session.lock import SessionBusy, SessionLock
from mlxchat.store import SessionNotFound, SessionStore
from mlxchat.store.api_messages import IndexedMessage

HASH_VERSION = "mlxchat-api/1"


@dataclass(frozen=True)
class IncomingMessage:
    """One message of a request as the API client sees it."""

    role: Role
    content: str
    signature: str = ""
    """What else the client sees of it (tool calls, canonical JSON): hashed too."""
    calls: tuple[CalledTool, ...] = ()
    """A reply's tool calls, stored with it."""
    call_id: str | None = None
    """A tool result's call id and its tool's name, stored with it."""
    tool_name: str | None = None
    images: tuple[ImageBlob, ...] = ()
    """A user message's images as sent (their digests are in ``signature``)."""
    reasoning: str | None = None
    """A reply's reasoning as the client sent it back (stored, never hashed)."""

    def stored(self, images: tuple[ImageRef, ...] = ()) -> Message:
        return Message(self.role, self.content, tool_calls=self.calls,
                       tool_call_id=self.call_id, tool_name=self.tool_name, images=images,
                       reasoning=self.reasoning)


@dataclass(frozen=True)
class ApiRequest:
    system: str | None
    messages: Sequence[IncomingMessage]
    """The conversation after the system prompt; it ends with the new user
    message or with new tool results."""
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Generation settings of this request (names of ``GenerationSettings``)."""
    session_name: str | None = None
    """A session the client names (``X-Session``, ``user``): id or exact title."""
    tools: str | None = None
    """Tool definitions for the template (canonical JSON), or None."""
    output: CompiledFormat | None = None
    """The schema the reply follows (``response_format``, ``format``), compiled."""
    fills_window: bool = False
    """Its max_tokens is a cap the window may cut short (Anthropic's): the
    prompt needs only to fit, and the reply ends where the window is full."""
    options: ReplyOptions = ASKS_NOTHING
    """Biases, penalties, log-probabilities and choices the request asks for."""
    prefill: str | None = None
    """The text the reply begins with (a last message of the assistant's):
    the model continues it; the reply is stored with it."""
    after: int | None = None
    """A stored reply the messages follow (a ``previous_response_id``): the
    request sends only what comes after it, and ``system`` is left aside."""


@dataclass
class ApiTurn:
    session_id: int
    events: Iterator[Event]
    extended: int
    """Messages of the request found stored (the branch it extends)."""


def _link(previous: str, message: IncomingMessage) -> str:
    text = "\0".join((previous, message.role, message.content, message.signature))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def chain_hashes(model: str, system: str | None,
                 messages: Sequence[IncomingMessage], *, root: str | None = None) -> list[str]:
    """One hash per message: of the model, the system prompt and every message
    up to and including it (``root``: the hash of a stored message they follow)."""
    root = root or hashlib.sha256("\0".join((HASH_VERSION, model, system or "")).encode(
        "utf-8", "surrogatepass")).hexdigest()[:32]
    out: list[str] = []
    for message in messages:
        out.append(_link(out[-1] if out else root, message))
    return out


def conversation_key(model: str, request: ApiRequest) -> str:
    """Which conversation a request belongs to, before it is placed (the lane's
    fairness): the session it names, else its first message's chain hash."""
    if request.session_name:
        return f"session:{request.session_name}"
    if request.after is not None:
        return f"after:{request.after}"
    return chain_hashes(model, request.system, request.messages[:1])[0] \
        if request.messages else ""


def _new_part(messages: Sequence[IncomingMessage], *, after_reply: bool = False
              ) -> list[IncomingMessage]:
    """What a request adds: its last message, the user's, or the tool results
    it ends with (and a user message of text after them: Anthropic's clients
    send both in one turn; the ledger extends by all of it); with system
    messages among them, every message after the last reply. ``after_reply``:
    the messages follow a stored reply, which tool results at the start answer."""
    if not messages or messages[-1].role not in ("user", "tool", "system"):
        raise ConversationError("The last message must be the user's or a tool result.")
    first = len(messages)
    while first > 0 and messages[first - 1].role != "assistant":
        first -= 1
    tail = list(messages[first:])
    if any(m.role == "system" for m in tail):
        results = next((i for i, m in enumerate(tail) if m.role != "tool"), len(tail))
        if (results and first == 0 and not after_reply) or any(m.role == "tool" for m in tail[results:]):
            raise ConversationError("Tool results must follow the reply that called the tools.")
        return tail
    end = len(messages)
    if messages[-1].role == "user":
        if len(messages) < 2 or messages[-2].role != "tool" or messages[-1].images:
            return [messages[-1]]
        end -= 1
    first = end
    while first > 0 and messages[first - 1].role == "tool":
        first -= 1
    if (first == 0 and not after_reply) or (first > 0 and messages[first - 1].role
                                            != "assistant"):
        raise ConversationError("Tool results must follow the reply that called the tools.")
    return list(messages[first:])


def served_cap(stored: GenerationSettings, served: GenerationSettings) -> int | None:
    """A session's window cap under the server's (``serve --context``, else the
    settings' ``context_window``): one stored without a cap or with a larger one
    (by the chat, an earlier run) is served at the server's, the window its KV
    was admitted for."""
    caps = [cap for cap in (stored.context_window, served.context_window) if cap]
    return min(caps) if caps else None


ReplyForm = Callable[[TurnDone], IncomingMessage]
"""How the client will see a reply (its content and tool calls), to index it."""


class ApiTurns:
    """Places each API request on its session and branch of one conversation."""

    def __init__(self, conv: Conversation, store: SessionStore, *, policy: str = "stop"):
        self.conv = conv
        self.store = store
        self.policy = policy
        """What a history past the window gets unless the request says (``serve
        --context-policy``): stop (a 400), compact or drop_oldest."""

    def begin(self, request: ApiRequest, reply_form: ReplyForm) -> ApiTurn:
        """Find or start the request's branch, commit its new message (or tool
        results) and return the turn's events (the reply is indexed once they
        are consumed). Raises an ``MlxchatError`` (nothing stored) when it is refused."""
        messages = list(request.messages)
        new = _new_part(messages, after_reply=request.after is not None)
        follows = self._follows(request.after)
        hashes = chain_hashes(self.conv.model_spec, request.system, messages,
                              root=follows.chain_hash if follows else None)
        named = self._named(request.session_name) if follows is None else None
        hit = self.store.api.longest(hashes[:-len(new)], session_id=follows.session_id
                                     if follows else named.id if named else None)
        if hit is None and follows is not None:  # nothing of the request stored yet
            hit = IndexedMessage(-1, follows.message_id, follows.session_id)
        created = False
        if hit is not None:
            self._open_at(hit.session_id, hit.message_id)
            start = hit.position + 1
        else:
            created = named is None
            self._open_empty(named, request.system)
            start = 0
        try:
            info = self.conv.views.model_info
            shown = [images.keep(m.images, sees=info.sees_images, model=info.name)
                     for m in messages[start:]]
            added = self._add_history(messages[start:-len(new)], hashes[start:-len(new)],
                                      shown)
        except MlxchatError:  # nothing of it stored
            self._undo(created, [])
            raise
        # No retrieval for API turns: the client sends its own context and would
        # never see the sources its [n] citations point to.
        stored = self.conv.session.settings
        self.conv.use_settings(dataclasses.replace(stored, **{
                                   "context_policy": self.policy, "docs": None,
                                   "context_window": served_cap(stored,
                                                                self.conv.settings.generation),
                                   **request.settings}),
                               tools=request.tools,
                               reserve=1 if request.fills_window else None)
        session_id = self.conv.session.id
        assert session_id is not None
        try:
            self.conv.turns.output = request.output
            self.conv.turns.options, self.conv.turns.prefill = request.options, request.prefill
            if new[0].role == "tool":
                events = self.conv.turns.send_results([m.stored() for m in new])
            elif len(new) > 1 or new[0].role == "system":  # system messages where they stand
                events = self.conv.turns.send_turn([m.stored(refs) for m, refs
                                                    in zip(new, shown[-len(new):])])
            else:
                self.conv.turns.images[:] = shown[-1]
                events = self.conv.turns.send(new[0].content)
        except MlxchatError:
            self._undo(created, added)
            raise
        last = self.conv.messages[-1]
        assert last.id is not None
        # Only the last of several results is indexed: the first holds the ids of all.
        self.store.api.record(session_id, last.id, hashes[-1])
        return ApiTurn(session_id, self._indexed(events, hashes[-1], reply_form), start)

    def recover_left_replies(self) -> int:
        """Store the replies a killed server (or app) was streaming, as far as
        they were checkpointed, marked stopped: every session's but those
        another holder has open (it may be streaming one now). How many."""
        if not self.store.path or self.store.path == ":memory:":
            return 0
        kept = 0
        for session_id in self.store.drafts.left():
            try:
                lock = SessionLock(self.store.path, session_id, holder="the API server")
            except SessionBusy:
                continue
            try:
                kept += self.store.drafts.recover(session_id) is not None
            finally:
                lock.release()
        return kept

    def reopen_last(self) -> int | None:
        """The session the API used last opened again at its leaf, its KV
        restored (at the server's start: a client going on after a restart
        finds it live, as before the restart); its id, or None when there is
        none on this model. SessionBusy when another holder has it."""
        used = self.store.api.sessions_by_use()
        if not used:
            return None
        session = self.store.get_session(used[-1])
        if session.model != self.conv.model_spec or session.leaf_id is None:
            return None
        try:
            self._open_at(used[-1], session.leaf_id)
        finally:
            self.conv.locks.release()  # held per request
        return used[-1]

    # -- where the request goes ---------------------------------------------------------
    def _follows(self, message_id: int | None) -> IndexedMessage | None:
        """The stored reply a request follows (with its chain hash), if it names one."""
        if message_id is None:
            return None
        found = self.store.api.of_message(message_id)
        if found is None:
            raise ConversationError("The conversation that response belongs to is gone.")
        return found

    def _named(self, name: str | None) -> Session | None:
        """The session the client named, created (titled so) when there is none."""
        if not name:
            return None
        try:
            return self.store.find_session(name, prefix=False)
        except SessionNotFound:  # two requests may name it at once: one creates it
            return self.store.titled_session(name, self.conv.model_spec, None,
                                             dataclasses.replace(self.conv.settings.generation))[0]

    def _open_at(self, session_id: int, message_id: int) -> None:
        """Open the session at ``message_id``: its branch's KV stays warm when
        it is the live one, else comes back from the segments."""
        conv = self.conv
        if conv.session.id != session_id:
            conv.check_free(session_id)  # refused early; written to only under its lock

            def place(held: int) -> None:
                self._same_model(held)
                self.store.branches.set_leaf(held, message_id)
            if self._hold_current():
                conv.saved.discard_if_empty()  # the server's start-up session, never used
            # Restores the branch's segments; the session left is joined when idle.
            conv.open_session(session_id, prepare=place, join_left=False)
            return
        conv.hold_session()  # SessionBusy: the chat or another process has it now
        if conv.session.leaf_id != message_id:
            self.store.branches.set_leaf(session_id, message_id)
            conv.reload()
            conv.cache.restore()

    def _hold_current(self) -> bool:
        """Hold the open session again, read afresh (the server lets go of it
        between requests); False when another holder has it now."""
        try:
            self.conv.hold_session()
        except SessionBusy:
            return False
        return True

    def _same_model(self, session_id: int) -> None:
        """A session stays on the served model (never loads another)."""
        if self.store.get_session(session_id).model != self.conv.model_spec:
            self.store.update_model(session_id, self.conv.model_spec)

    def _open_empty(self, named: Session | None, system: str | None) -> None:
        """A new session, or the named one from its root (a new branch)."""
        conv = self.conv
        if named is not None and named.id is not None:
            conv.check_free(named.id)  # refused early; written to only under its lock
            if conv.session.id != named.id:
                if self._hold_current():
                    conv.saved.discard_if_empty()
                conv.open_session(named.id, prepare=self._same_model, join_left=False)
            else:
                conv.hold_session()
                self._same_model(named.id)
            self.store.branches.set_leaf(named.id, None)
            conv.reload()
        elif (not self._hold_current() or conv.messages or conv.session.pins
              or conv.model_spec != conv.session.model):
            conv.new_session(join_left=False)
        if conv.session.system_prompt != system:
            conv.set_system_prompt(system)

    def _add_history(self, messages: Sequence[IncomingMessage], hashes: Sequence[str],
                     shown: Sequence[tuple[ImageRef, ...]]) -> list[int]:
        """Store the request's messages the branch lacks (but the last), as given
        (with their kept images) and indexed, all or none (one transaction)."""
        session_id = self.conv.session.id
        assert session_id is not None
        if not messages:
            return []
        stored = self.store.add_messages(session_id, [m.stored(refs) for m, refs
                                                      in zip(messages, shown)],
                                         api_hashes=hashes)
        self.conv.reload()
        return [m.id for m in stored if m.id is not None]

    def _undo(self, created: bool, added: list[int]) -> None:
        """A refused request leaves no session behind; a refused branch of an
        existing session is left, its position back where it was."""
        if created:
            self.conv.delete_session()
        elif added:
            first = next(m for m in self.conv.messages if m.id == added[0])
            self.store.branches.set_leaf(self.conv.session.id, first.parent_id)
            self.conv.reload()

    def _indexed(self, events: Iterator[Event], user_hash: str,
                 reply_form: ReplyForm) -> Iterator[Event]:
        done: TurnDone | None = None
        for event in events:
            if isinstance(event, TurnDone):
                done = event
            yield event
        last = self.conv.messages[-1] if self.conv.messages else None
        if done is not None and last is not None and last.role == "assistant":
            assert last.id is not None and self.conv.session.id is not None
            form = reply_form(done)
            if form.calls or form.content != last.content:
                # Stored as the client will send it back: the text (cut at a stop
                # string), then the calls.
                self.store.set_reply_calls(last.id, form.content, form.calls)
                self.conv.reload()
            self.store.api.record(self.conv.session.id, last.id, _link(user_hash, form))
