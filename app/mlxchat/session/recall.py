"""What left the window, brought back when it matters: ``conv.recall``.

A branch's messages that are no longer in the model's view (before the first
message a compaction kept, and those the newest drop_oldest turn left out) are
indexed in the session's hidden collection (``docs.recall_index``: chunks,
embeddings, FTS5), ahead of time while a compaction is prepared, else when a
message needs them. Each new message finds the passages of them that match
it (at most ``RECALL_K``, within a ``RECALL_SHARE``-th of the window, each
close enough in meaning: ``RECALL_SIMILARITY``) and they go in front of it as
a block of sources, numbered after any documents it retrieved; they are
stored with the message (its ``sources``, collection ``RECALLED``) and are
part of its token ledger, so nothing is recalled twice for one message.
``recall off`` (a setting) stops it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

from mlxchat.chat import Message, latest_summary
from mlxchat.engine.interface import Engine
from mlxchat.session.current import OpenSession
from mlxchat.session.retrieval import Retrieval
from mlxchat.sources import Source, sources_block
from mlxchat.store import SessionStore
from mlxchat.store.documents import recall_collection

if TYPE_CHECKING:
    from mlxchat.docs import Retriever

log = logging.getLogger(__name__)

RECALLED = "earlier in this conversation"
"""The collection name recalled passages carry (their block and their rows)."""
RECALL_K = 3
RECALL_SHARE = 16
"""Recalled passages take at most 1/16 of the window (and at least MIN_BUDGET tokens)."""
MIN_BUDGET = 256


def out_of_view(branch: Sequence[Message]) -> list[Message]:
    """The branch's messages the model no longer sees: those a compaction's
    summary stands for, and those the newest turn that dropped messages to fit
    (``drop_oldest``) left out after it."""
    at = latest_summary(branch)
    first = at - branch[at].compaction.kept if at is not None else 0  # type: ignore[union-attr]
    said = [m for m in branch if m.role in ("user", "assistant", "tool")]
    gone = [m for m in branch[:first] if m.role in ("user", "assistant", "tool")]
    view = said[len(gone):]
    for m in reversed(branch[(at or 0):]):
        if m.role == "assistant" and m.stats is not None and m.stats.dropped_messages:
            gone += view[:m.stats.dropped_messages]
            break
    return gone


class Recall:
    """The open session's recall of its own earlier messages."""

    def __init__(self, open_session: OpenSession, store: SessionStore, engine: Engine, *,
                 retrieval: Retrieval):
        self._open, self._store, self._engine = open_session, store, engine
        self._retrieval = retrieval
        """Whose thread and embedder recall uses (the documents' ones)."""
        self._retriever: Retriever | None = None
        self.last: list[Source] = []
        """What the last message sent in this process recalled."""

    @property
    def on(self) -> bool:
        return self._open.generation.recall and self._open.id is not None

    def gone(self) -> list[Message]:
        """The open branch's messages no longer in the model's view."""
        return out_of_view(self._open.messages)

    def _name(self) -> str:
        return recall_collection(self._open.stored_id())

    def index(self, messages: Sequence[Message]) -> int:
        """Index those of ``messages`` not indexed yet (on the documents'
        thread); how many were added. Never raises: recall is a help."""
        from mlxchat.docs.recall_index import index_messages, message_path

        items = [(message_path(m.id, m.role), m.content) for m in messages if m.id is not None]
        if not self.on or not items:
            return 0
        try:
            return self._retrieval.on_thread(lambda: index_messages(
                self._store.documents, self._retrieval.embedder(), self._name(), items))
        except Exception:  # noqa: BLE001 - a missing embedder, a full disk: no recall
            log.warning("messages not indexed for recall", exc_info=True)
            return 0

    def recall(self, text: str, *, first: int = 1) -> list[Source]:
        """The passages of what left the model's view that match ``text``,
        numbered from ``first``, within the budget (kept as ``last``)."""
        self.last = []
        gone = self.gone() if self.on and text.strip() else []
        if not gone:
            return []
        from mlxchat.docs.recall_index import message_of, message_path, recall_hits

        self.index(gone)
        allowed = {message_path(m.id, m.role) for m in gone if m.id is not None}
        try:
            hits = self._retrieval.on_thread(lambda: recall_hits(
                self.retriever(), self._name(), text, allowed=allowed))
        except Exception:  # noqa: BLE001
            log.warning("nothing recalled", exc_info=True)
            return []
        found: list[Source] = []
        for hit in hits:
            if len(found) == RECALL_K:
                break
            message_id, role = message_of(hit.path) or (0, "")
            source = Source(n=first + len(found), collection=RECALLED,
                            path=f"message {message_id} ({role})", start_line=hit.start_line,
                            end_line=hit.end_line, text=hit.text, score=round(hit.score, 6))
            source.tokens = self._tokens(source.entry())
            if self._tokens(sources_block(RECALLED, [*found, source])) > self.budget():
                continue
            found.append(source)
        self.last = found
        return found

    @staticmethod
    def message_id(source: Source) -> int | None:
        """The message a recalled passage came from (None: not a recalled one)."""
        if source.collection != RECALLED or not source.path.startswith("message "):
            return None
        word = source.path.split()[1]
        return int(word) if word.isdigit() else None

    def report(self) -> list[dict]:
        """What the last message recalled, as a script reads it: each passage's
        text, the message it came from, its tokens, score and number."""
        return [{"text": s.text, "message_id": self.message_id(s), "tokens": s.tokens,
                 "score": s.score, "n": s.n} for s in self.last]

    def budget(self) -> int:
        window = self._engine.prompts.window(self._open.generation)
        return max(MIN_BUDGET, window // RECALL_SHARE)

    def _tokens(self, text: str) -> int:
        return len(self._engine.loaded.tokenizer.encode(text, add_special_tokens=False))

    def retriever(self) -> Retriever:
        from mlxchat.docs import Retriever

        if self._retriever is None:
            self._retriever = Retriever(self._store.documents, self._retrieval.embedder())
        return self._retriever
