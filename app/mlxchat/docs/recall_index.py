"""A conversation's own messages, searchable as documents are: each session's
messages that left the model's view (summarized by a compaction, or left out
by drop_oldest) are chunked, embedded and kept in a hidden collection of the
session's database (``store.documents.recall_collection``), and a new message
finds the passages of them that match it with the same hybrid search (BM25 and
the embeddings, fused by rank: ``docs.search``).

Only passages close in meaning come back: a cosine similarity of at least
``RECALL_SIMILARITY`` to the new message. all-MiniLM-L6-v2 put the passages
that answered a question at 0.46-0.77 and every other one at or below 0.19 on
the bench's facts (``bench/long_conversation.py``), so a message about nothing
said before ("Thanks. One more word?") brings nothing back.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

from mlxchat.docs.chunking import ChunkSizes, chunk_text
from mlxchat.docs.embedder import Embedder
from mlxchat.docs.indexer import vector_blobs
from mlxchat.docs.search import Hit, Retriever
from mlxchat.store.documents import CollectionNotFound, Documents, FileUpdate, NewChunk

RECALL_SIMILARITY = 0.35
"""A passage comes back only when its cosine similarity to the message is at least this."""
CANDIDATES = 20


def message_path(message_id: int, role: str) -> str:
    """How a message is named in the hidden collection (as a file would be)."""
    return f"message:{message_id}:{role}"


def message_of(path: str) -> tuple[int, str] | None:
    """The message id and role a recall passage came from, or None."""
    parts = path.split(":")
    if len(parts) != 3 or parts[0] != "message" or not parts[1].isdigit():
        return None
    return int(parts[1]), parts[2]


def index_messages(documents: Documents, embedder: Embedder, name: str,
                   messages: Sequence[tuple[str, str]]) -> int:
    """Chunk, embed and store the messages (path, text) not in collection
    ``name`` yet (made on first use); how many were added."""
    try:
        info = documents.get(name)
    except CollectionNotFound:
        info = documents.create(name, [], embedder=embedder.name, dims=embedder.dims)
    have = documents.files(info.id)
    sizes = ChunkSizes.reading(embedder.reads)
    todo = []
    for path, text in messages:
        if path in have or not text.strip():
            continue
        chunks = chunk_text(text, "text", sizes=sizes, pieces=embedder.word_pieces)
        todo.append((path, text, chunks))
    texts = [c.text for _, _, chunks in todo for c in chunks]
    if not texts:
        return 0
    blobs = iter(vector_blobs(embedder.embed(texts)))
    files = []
    for path, text, chunks in todo:
        data = text.encode("utf-8", "replace")
        update = FileUpdate(path, "message", len(data), 0, hashlib.sha256(data).hexdigest(), 0)
        files.append((update, [NewChunk(c.start_line, c.end_line, "", c.text, c.tokens,
                                        next(blobs)) for c in chunks]))
    documents.replace_files(info.id, files)
    return len(files)


def recall_hits(retriever: Retriever, name: str, query: str, *, allowed: set[str],
                floor: float = RECALL_SIMILARITY) -> list[Hit]:
    """The passages of the ``allowed`` messages (paths) that match ``query``,
    best first, each at least ``floor`` similar to it."""
    try:
        hits = retriever.search(name, query, k=CANDIDATES)
    except CollectionNotFound:
        return []
    return [h for h in hits if h.path in allowed and (h.similarity or 0.0) >= floor]
