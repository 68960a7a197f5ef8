"""A finished reply the database would not take yet (another process holds its
write lock): kept in memory, retried in the background until it is stored,
and as a last resort written to a private file that the next open stores.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from mlxchat import paths
from mlxchat.chat import Message
from mlxchat.files import write_private_text
from mlxchat.session.current import OpenSession
from mlxchat.session.errors import ConversationError
from mlxchat.store import SessionStore, StoreError, StoreLocked
from mlxchat.turn_stats import TurnStats

log = logging.getLogger(__name__)

RETRY_S = 0.25
#: How long a new action waits for a pending reply to be stored before refusing.
PENDING_WAIT_S = 2.0


@dataclass
class PendingReply:
    session_id: int
    parent_id: int | None
    content: str
    stats: dict = field(default_factory=dict)
    cancelled: bool = False
    token_ids: list[int] | None = None
    ledger_key: str | None = None
    reasoning: str | None = None

    def store_in(self, store: SessionStore, *, wait_s: float) -> None:
        """Add the reply after its parent (raises StoreLocked while still locked)."""
        with store.patience(wait_s):
            store.add_message(self.session_id, "assistant", self.content,
                              parent_id=self.parent_id, stats=TurnStats.from_dict(self.stats),
                              token_count=self.stats.get("generated_tokens"),
                              cancelled=self.cancelled, token_ids=self.token_ids,
                              ledger_key=self.ledger_key, reasoning=self.reasoning)


def unsaved_file(session_id: int) -> Path:
    return paths.data_dir() / "unsaved" / f"reply-{session_id}.json"


class ReplyKeeper:
    """Retries one pending reply in a thread until the store takes it."""

    def __init__(self, store: SessionStore, reply: PendingReply):
        self.reply = reply
        self.stored = threading.Event()
        self._stop = threading.Event()
        self._store = store
        self._thread = threading.Thread(target=self._run, name="mlxchat-reply-retry",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.reply.store_in(self._store, wait_s=RETRY_S)
            except StoreLocked:
                self._stop.wait(RETRY_S)
                continue
            except StoreError as exc:  # the session was deleted meanwhile, say
                log.warning("reply could not be stored: %s", exc)
                self._stop.set()
                return
            self.stored.set()
            return

    def wait(self, seconds: float) -> bool:
        return self.stored.wait(seconds)

    def give_up(self) -> Path | None:
        """Stop retrying; if the reply is still not stored, keep it in a file."""
        self._stop.set()
        self._thread.join(timeout=2 * RETRY_S + 1)
        if self.stored.is_set():
            return None
        path = unsaved_file(self.reply.session_id)
        paths.ensure_private_dir(path.parent)
        write_private_text(path, json.dumps(asdict(self.reply)))
        return path


class UnsavedReplies:
    """The finished reply the database has not taken yet, if any: nothing may
    follow it until it is stored (``require_saved``); ``stored()`` runs once it
    is (its KV segment is written then)."""

    def __init__(self, store: SessionStore, open_session: OpenSession, *,
                 stored: Callable[[], None]):
        self._store = store
        self._open = open_session
        self._stored = stored
        self._keeper: ReplyKeeper | None = None

    def require_saved(self) -> None:
        """Return once no reply waits to be stored (at most PENDING_WAIT_S);
        ConversationError when one still does."""
        if not self.waiting:
            return
        if not self.wait(PENDING_WAIT_S):
            raise ConversationError(
                "Your last reply is not saved yet: the session database is locked by another "
                "process. It is kept and retried; try again in a moment.")
        self._open.reload()
        self._stored()

    def recover(self) -> Message | None:
        """Store a reply a previous run could not (the database was locked), and
        one left half-written by a crash or kill, marked stopped (returned)."""
        session_id = self._open.id
        if session_id is not None and store_unsaved(self._store, session_id):
            self._open.reload()
        message = self._store.drafts.recover(session_id)
        if message is not None:
            self._open.reload()
        return message

    @property
    def waiting(self) -> bool:
        return self._keeper is not None

    def keep(self, reply: PendingReply) -> None:
        """Retry ``reply`` in the background until the store takes it."""
        self._keeper = ReplyKeeper(self._store, reply)

    def wait(self, seconds: float) -> bool:
        """True when nothing is waiting any more (stored within ``seconds``)."""
        if self._keeper is not None and self._keeper.wait(seconds):
            self._keeper = None
        return self._keeper is None

    def give_up(self) -> Path | None:
        """Stop retrying; a reply still not stored is kept in a file (its path)."""
        keeper, self._keeper = self._keeper, None
        return keeper.give_up() if keeper is not None else None


def store_unsaved(store: SessionStore, session_id: int) -> bool:
    """Store a reply a previous run had to leave in a file; True when one was."""
    path = unsaved_file(session_id)
    if not path.is_file():
        return False
    try:
        reply = PendingReply(**json.loads(path.read_text(encoding="utf-8")))
        reply.store_in(store, wait_s=5.0)
    except (ValueError, TypeError, StoreError, OSError) as exc:
        log.warning("unsaved reply %s not stored: %s", path, exc)
        return False
    path.unlink(missing_ok=True)
    return True
