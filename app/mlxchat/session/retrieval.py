"""The session's document collection: what a message retrieves, within a token
budget, and the collections themselves for the commands and the UI.

A message sent with a collection in use (``GenerationSettings.docs``) gets the
top chunks for its text that pass the relevance floor (``docs.relevance``),
byte-identical ones once, as many as fit ``docs_budget`` tokens (default 1/8
of the window, at least 512, never more than the window has left), numbered in
a block in front of the question (``mlxchat.sources``). The chunks are stored
with the message and are part of its token ledger, so reopening, retrying,
branching or exporting never retrieves again.

The embedder (and MLX with the docs package) loads on first use: sessions
without a collection never pay for it. Everything that runs MLX for documents
(embedding, the dense search) runs on this object's one thread: MLX streams
belong to a thread, and the threads that call in (the UI's pooled workers)
may have released theirs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

from mlxchat.engine.interface import Engine
from mlxchat.errors import MlxchatError
from mlxchat.generation import DOCS_BUDGET_AUTO_MIN, DOCS_BUDGET_SHARE
from mlxchat.session.current import OpenSession
from mlxchat.session.mlx_thread import MlxThread
from mlxchat.sources import Source, sources_block
from mlxchat.store import SessionStore
from mlxchat.store.documents import CollectionInfo, CollectionNotFound

if TYPE_CHECKING:
    from mlxchat.docs import IndexProgress, IndexReport, Retriever
    from mlxchat.docs.embedder import Embedder
    from mlxchat.docs.relevance import SameText

T = TypeVar("T")

CANDIDATES_PER_K = 2
"""Hits asked for per chunk wanted: ones over the budget leave room for smaller ones."""


class RetrievalError(MlxchatError):
    """Retrieval cannot run as asked; one line for the user."""


@dataclass(frozen=True)
class Retrieved:
    """What a message retrieved, known before its prefill starts."""

    collection: str
    sources: list[Source]
    budget: int
    """The tokens the sources block could take."""
    block_tokens: int
    """What the whole block (sources, numbering, instruction) costs in the
    prompt: at most ``budget``."""
    left_out: int
    """Hits that did not fit the budget."""
    forecast_s: float | None
    """Seconds the block will take to prefill where it goes in the window, from
    the prefill rates measured on this model (None: nothing measured yet)."""
    below_floor: int = 0
    """Of the top ``docs_k`` hits, those left out as far less relevant than the
    best (``docs.relevance``)."""

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.sources)


class Retrieval:
    def __init__(self, open_session: OpenSession, store: SessionStore, engine: Engine, *,
                 window_left: Callable[[], int],
                 prefill_seconds: Callable[[int], float | None],
                 embedder: Callable[[], Embedder] | None = None):
        self._open = open_session
        self._docs = store
        """Where the collections are: the session's database, unless told otherwise."""
        self._engine = engine
        self._window_left = window_left
        self._prefill_seconds = prefill_seconds
        self._embedder_factory = embedder
        self._embedder: Embedder | None = None
        self._retriever: Retriever | None = None
        self._lock = threading.Lock()
        self._thread: MlxThread | None = None
        self.last: Retrieved | None = None
        """What the last message sent in this process retrieved."""

    def collections_from(self, store: SessionStore) -> None:
        """Read collections from ``store`` (a throwaway session's questions use
        the app's database for them)."""
        self._docs = store
        self._retriever = None

    # -- the session's choice --------------------------------------------------------
    @property
    def in_use(self) -> str | None:
        return self._open.generation.docs

    def use(self, name: str | None) -> CollectionInfo | None:
        """Retrieve from ``name`` for this session's messages (None: stop)."""
        info = self.collection(name) if name is not None else None
        self._open.change_generation(docs=name)
        return info

    def budget(self, message: str = "") -> int:
        """Tokens the sources block of the next message may take: the setting
        (or 1/8 of the window, at least 512), never more than the window has
        left once the message itself (``message``) and the reply's reserve are
        counted."""
        settings = self._open.generation
        window = self._engine.prompts.window(settings)
        wanted = settings.docs_budget or max(window // DOCS_BUDGET_SHARE, DOCS_BUDGET_AUTO_MIN)
        room = (self._window_left() - self._engine.prompts.reply_reserve(settings)
                - (self._tokens(message) if message else 0))
        return max(0, min(wanted, room))

    # -- collections -------------------------------------------------------------------
    def collections(self) -> list[CollectionInfo]:
        return self._docs.documents.list()

    def collection(self, name: str) -> CollectionInfo:
        from mlxchat.docs.indexer import check_name

        return self._docs.documents.get(check_name(name))

    def add(self, name: str, paths: Sequence[str | Path], *,
            on_progress: Callable[[IndexProgress], None] | None = None,
            cancel: threading.Event | None = None, follow_links: bool = False) -> IndexReport:
        from mlxchat.docs import Indexer
        from mlxchat.docs.indexer import check_name
        from mlxchat.docs.walk import check_roots

        check_name(name)
        check_roots(paths)  # bad paths fail before the embedder loads
        return self.on_thread(lambda: Indexer(self._docs.documents, self.embedder()).add(
            name, paths, on_progress=on_progress, cancel=cancel, follow_links=follow_links))

    def update(self, name: str, *, on_progress: Callable[[IndexProgress], None] | None = None,
               cancel: threading.Event | None = None) -> IndexReport:
        from mlxchat.docs import Indexer

        self.collection(name)
        return self.on_thread(lambda: Indexer(self._docs.documents, self.embedder()).update(
            name, on_progress=on_progress, cancel=cancel))

    def remove(self, name: str) -> CollectionInfo:
        """Delete a collection and its index; this session stops using it. Messages
        that retrieved from it keep their sources."""
        info = self._docs.documents.delete(self.collection(name).name)
        with self._lock:
            self._retriever = None  # its vectors in memory go with it
        if self.in_use == info.name:
            self._open.change_generation(docs=None)
        return info

    # -- the turn ------------------------------------------------------------------------
    def retrieve(self, text: str, *, message: str = "", remember: bool = True,
                 collection: str | None = None) -> Retrieved | None:
        """The sources for a message asking ``text`` (the whole ``message`` as
        it will be sent counts against the room left), kept as ``last`` unless
        not ``remember`` (a preview); from ``collection`` (a preview's choice),
        else the one in use; None when there is none."""
        name = collection or self.in_use
        if name is None or not text.strip():
            return None
        if collection is not None:
            self.collection(collection)  # a name that is not there: said as such
        try:
            self._docs.documents.get(name)
        except CollectionNotFound:
            raise RetrievalError(f"This session retrieves from {name!r}, which no longer "
                                 "exists (/docs use another, or off). Nothing was sent.") \
                from None
        settings = self._open.generation
        budget = self.budget(message or text)
        from mlxchat.docs.relevance import by_text, relevant
        from mlxchat.docs.search import CANDIDATES

        # Every hit the search fused: the floor, not a cut at k, decides whether
        # a document's later chunks (spread after other files' best) still go.
        hits = self.on_thread(lambda: self.retriever().search(
            name, text, k=max(settings.docs_k * CANDIDATES_PER_K, 2 * CANDIDATES)))

        kept = relevant(hits)
        sources: list[Source] = []
        block = left_out = 0
        for group in by_text(kept):
            if len(sources) == settings.docs_k:
                break
            source = _source(name, len(sources) + 1, group)
            source.tokens = self._tokens(source.entry())
            # The whole block counts: its numbering, tags and the citing instruction too.
            with_it = self._tokens(sources_block(name, [*sources, source]))
            if with_it > budget:
                left_out += 1
                continue
            block = with_it
            sources.append(source)
        found = Retrieved(name, sources, budget, block, left_out,
                          self._prefill_seconds(block) if sources else None,
                          below_floor=_dropped(hits[:settings.docs_k], kept))
        if remember:
            self.last = found
        return found

    def _tokens(self, text: str) -> int:
        return len(self._engine.loaded.tokenizer.encode(text, add_special_tokens=False))

    def on_thread(self, work: Callable[[], T]) -> T:
        """Run ``work`` on the documents' MLX thread and wait for it."""
        with self._lock:
            if self._thread is None:
                self._thread = MlxThread("mlxchat-docs")
            thread = self._thread
        return thread.call(work)

    def close(self) -> None:
        """Let the documents' thread go (its MLX streams released by itself)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.stop()

    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                if self._embedder_factory is None:
                    from mlxchat.docs.embedder import default_embedder
                    self._embedder_factory = default_embedder
                self._embedder = self._embedder_factory()
            return self._embedder

    def retriever(self) -> Retriever:
        from mlxchat.docs import Retriever

        embedder = self.embedder()
        with self._lock:
            if self._retriever is None:
                self._retriever = Retriever(self._docs.documents, embedder)
            return self._retriever


def _source(collection: str, n: int, group: SameText) -> Source:
    """The source of a hit, naming where else its very text is (sent once)."""
    hit = group.hit
    return Source(n=n, collection=collection, path=hit.path, start_line=hit.start_line,
                  end_line=hit.end_line, heading=hit.heading, text=hit.text,
                  score=round(hit.score, 6), chunk_id=hit.chunk_id, stale=hit.stale,
                  also=[twin.place for twin in group.twins])


def _dropped(top: list, kept: list) -> int:
    ids = {h.chunk_id for h in kept}
    return sum(h.chunk_id not in ids for h in top)
