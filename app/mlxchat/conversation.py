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

from mlxchat import paths
from mlxchat.chat import GenerationSettings, Message, Session, TurnStats, attachment_block
from mlxchat.config import Settings
from mlxchat.engine import (EngineError, EngineState, Event, PrefillProgress, SnapshotLoad,
                            TextDelta, TurnDone)
from mlxchat.engine.interface import Engine
from mlxchat.errors import MlxchatError
from mlxchat.models.info import LoadedModel, ModelInfo
from mlxchat.session_life import SessionLife, remove_files
from mlxchat.store import SessionStore, StoreError

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


class Conversation(SessionLife):
    def __init__(self, *, settings: Settings, store: SessionStore, engine: Engine,
                 model_spec: str, load_model: ModelLoader | None = None,
                 session: Session | None = None, keep_snapshots: bool = True):
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
        self.session: Session = session or self._new_session()
        self.recover()

    # -- sessions ----------------------------------------------------------
    def _new_session(self) -> Session:
        return self.store.create_session(self.model_spec, self.settings.system_prompt,
                                         dataclasses.replace(self.settings.generation))

    def new_session(self) -> Session:
        """Start an empty session; the engine cache stays until the next turn trims it."""
        self.session = self._new_session()
        self._forget_session_state()
        return self.session

    def _forget_session_state(self) -> None:
        self.attachments.clear()
        self.last_stats = None
        self.last_snapshot = None
        self._call_settings = None

    def open_session(self, id_or_title: str | int) -> Session:
        """Open a saved session and restore its KV snapshot when one is usable."""
        session = (self.store.get_session(id_or_title) if isinstance(id_or_title, int)
                   else self.store.find_session(id_or_title))
        if session.model and session.model != self.model_spec:
            self.switch_model(session.model)
        self.session = session
        self._forget_session_state()
        self.recover()
        self.restore_snapshot()
        return self.session

    def recover(self) -> Message | None:
        """Store a reply left half-written by a crash or kill, marked stopped."""
        message = self.store.recover_draft(self.session.id)
        if message is not None:
            self.reload()
        return message

    def reload(self) -> Session:
        self.session = self.store.get_session(self.session.id)
        return self.session

    def snapshot_words(self) -> str:
        """What happened to the session's KV snapshot when it was opened."""
        snap = self.last_snapshot
        if snap is None:
            return "no KV snapshot: the next turn prefills the history"
        if snap.ok:
            return f"KV cache restored from its snapshot ({snap.tokens:,} tokens)"
        return f"KV snapshot not used ({snap.reason}); the next turn recomputes the history"

    def restore_snapshot(self) -> SnapshotLoad | None:
        """Load the session's newest snapshot into the engine (a rejection is
        reported by the next turn as its miss reason)."""
        record = self.store.latest_snapshot(self.session.id) if self.session.id else None
        if record is None:
            self.last_snapshot = None
            return None
        covered: list[Message] = []
        if record.leaf_id is not None:
            try:
                covered = self.store.branch_path(record.leaf_id)
            except StoreError:
                covered = []
        self.last_snapshot = self.engine.load_snapshot(
            record.path, expected_checksum=record.sha256,
            conversation=self._with_system(covered))
        return self.last_snapshot

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
        system = self.session.system_prompt
        return ([Message("system", system)] if system else []) + list(messages)

    def engine_messages(self, extra: list[Message] | None = None) -> list[Message]:
        return self._with_system(self.messages + (extra or []))

    # -- read-only views of the engine ------------------------------------------------
    @property
    def model_info(self) -> ModelInfo:
        return self.engine.info

    def state(self) -> EngineState:
        return self.engine.state()

    def branch_stats(self) -> TurnStats | None:
        """The live turn's stats, else those stored with the branch's last reply."""
        if self.last_stats is not None:
            return self.last_stats
        return next((m.stats for m in reversed(self.messages)
                     if m.role == "assistant" and m.stats is not None), None)

    def count_tokens(self, messages: list[Message]) -> int:
        return self.engine.count_tokens(messages)

    def message_tokens(self, messages: list[Message]) -> list[int]:
        return self.engine.message_tokens(messages)

    def check_fits(self, messages: list[Message]) -> int:
        """Raise ContextOverflowError unless ``messages`` (system included) fit."""
        return self.engine.check_fits(messages, self.generation)

    # -- turns ---------------------------------------------------------------
    def compose(self, text: str) -> str:
        """The user's text with any pending attachments in front."""
        parts = [attachment_block(a.path.name, a.text) for a in self.attachments]
        return "\n\n".join(parts + [text]) if parts else text

    def send(self, text: str) -> Iterator[Event]:
        """Commit the user message, then run the turn; yields the engine's events."""
        if not text.strip():
            raise ConversationError("Nothing to send.")
        content = self.compose(text)
        self.check_fits(self.engine_messages([Message("user", content)]))
        self.store.add_message(self.session.id, "user", content)
        self.attachments.clear()
        self.reload()
        return self._run_turn()

    def retry(self) -> Iterator[Event]:
        """Answer the last user message again, as a new branch beside the old reply."""
        msgs = self.messages
        if not msgs:
            raise ConversationError("Nothing to retry yet.")
        if msgs[-1].role == "assistant":
            self.store.set_leaf(self.session.id, msgs[-1].parent_id)
            self.reload()
        return self._run_turn()

    def edit_last(self, text: str) -> Iterator[Event]:
        """Replace the last user message with ``text`` on a new branch and answer it."""
        last = self.last_user_message()
        if last is None:
            raise ConversationError("There is no message to edit yet.")
        if not text.strip():
            raise ConversationError("The edited message is empty.")
        before = self.messages[:self.messages.index(last)]
        # Check the edited conversation fits before committing it, as send() does.
        self.check_fits(self._with_system(before + [Message("user", text)]))
        self.store.set_leaf(self.session.id, last.parent_id)
        self.store.add_message(self.session.id, "user", text)
        self.reload()
        return self._run_turn()

    def undo(self) -> int:
        """Step back before the last user message (kept on its branch); returns
        how many messages left the current branch."""
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

    def _run_turn(self) -> Iterator[Event]:
        if not self.messages or self.messages[-1].role != "user":
            raise ConversationError("The conversation does not end with a message to answer.")
        done: TurnDone | None = None
        parent = self.session.leaf_id
        pieces: list[str] = []
        saved_at = time.monotonic()
        try:
            for event in self.engine.turn(self.engine_messages(), self.generation):
                if isinstance(event, TurnDone):
                    done = event
                elif isinstance(event, TextDelta):
                    pieces.append(event.text)
                    if time.monotonic() - saved_at >= DRAFT_INTERVAL_S:
                        saved_at = time.monotonic()
                        self._checkpoint(parent, "".join(pieces))
                yield event
        finally:
            if done is not None:
                self._finish(done)
            elif pieces:
                # The engine failed mid-reply: keep what was shown, marked stopped.
                self.store.add_message(self.session.id, "assistant", "".join(pieces),
                                       cancelled=True)
                self.reload()

    def _checkpoint(self, parent: int | None, text: str) -> None:
        try:
            self.store.save_draft(self.session.id, parent, text)
        except StoreError as exc:  # a full disk must not stop the reply
            log.warning("reply checkpoint not saved: %s", exc)

    def _finish(self, done: TurnDone) -> None:
        stats = done.stats
        self.last_stats = stats
        cancelled = stats.finish_reason == "cancelled"
        if done.reply or not cancelled:
            self.store.add_message(self.session.id, "assistant", done.reply, stats=stats,
                                   token_count=stats.generated_tokens, cancelled=cancelled)
        self.reload()
        self.save_snapshot()

    def save_snapshot(self) -> Path | None:
        """Write the live cache for the session's leaf; never raises (disk full,
        permissions): the conversation is already committed."""
        if (not self._keep_snapshots or not self.engine.state().cached_tokens
                or self.session.id is None):
            return None
        leaf = self.session.leaf_id
        path = paths.snapshots_dir() / f"session-{self.session.id}-{leaf}.safetensors"
        try:
            paths.ensure_private_dir(path.parent)
            info = self.engine.save_snapshot(path)
            old = self.store.record_snapshot(
                self.session.id, leaf, path, sha256=info.checksum, token_count=info.tokens,
                file_bytes=info.bytes, mlx_lm_version=info.mlx_lm_version, kv_bits=info.kv_bits)
        except (OSError, ValueError, StoreError) as exc:
            log.warning("snapshot not saved: %s", exc)
            return None
        remove_files(stale for stale in old if Path(stale) != path)
        return path

    def drop_snapshot(self) -> int:
        """Forget the live cache and delete the session's snapshot files."""
        self.engine.drop_cache("cache dropped by /cache drop")
        files = self.store.drop_snapshots(self.session.id)
        remove_files(files)
        return len(files)

    # -- settings and model --------------------------------------------------
    def set_system_prompt(self, text: str | None) -> None:
        self.session = self.store.update_system_prompt(self.session.id, text or None)

    def update_generation(self, settings: GenerationSettings) -> None:
        self.session = self.store.update_session_settings(self.session.id, settings)

    def switch_model(self, spec: str) -> LoadedModel:
        if self._load_model is None:
            raise ConversationError("Switching models is not available here.")
        loaded = self._load_model(spec)
        self.engine.switch_model(loaded)
        self.model_spec = spec
        if self.session.id is not None:
            self.session = self.store.update_model(self.session.id, spec)
        return loaded

    def window_left(self) -> int:
        """Tokens still free in the context window for the next message."""
        window = self.engine.info.context_window
        used = self.engine.count_tokens(self.engine_messages()) if self.messages else 0
        return window - used

    def close(self) -> None:
        self.engine.close()

    def shutdown(self) -> None:
        """On exit: stop any turn, drop an unused session, stop the engine, close the store."""
        self.cancel()
        self.discard_if_empty()
        self.close()
        self.store.close()


# The engine's events and state are what a conversation reports: the UI takes
# them from here and never imports the engine.
__all__ = ["Attachment", "Conversation", "ConversationError", "EngineError", "EngineState",
           "Event", "PrefillProgress", "SnapshotLoad", "TextDelta", "TurnDone"]
