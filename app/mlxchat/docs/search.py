"""Hybrid search over a collection: BM25 (FTS5) and dense (MLX), fused by
reciprocal rank.

The dense side keeps one float16 matrix per collection in MLX, loaded on the
first search and again only when the collection's generation changes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from mlxchat.docs.embedder import Embedder
from mlxchat.docs.errors import DocsError
from mlxchat.store.documents import Documents, StoredChunk

RRF_K = 60
CANDIDATES = 50
"""Hits each side contributes to the fusion."""
MODES = ("hybrid", "bm25", "dense")
STOPWORDS = frozenset("""a an and are as at be by can do does for from how i if in into is it
its me my of on or so than that the their them then there these this to was we what when
where which who whom why will with you your""".split())
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Hit:
    chunk_id: int
    path: str
    start_line: int
    end_line: int
    heading: str
    text: str
    tokens: int
    score: float
    """The fused score (hybrid), the BM25 score or the cosine similarity."""
    bm25_rank: int | None
    dense_rank: int | None
    stale: str | None = None
    """Why the file no longer matches what was indexed (deleted, changed), if so."""

    @property
    def place(self) -> str:
        return f"{self.path}:{self.start_line}-{self.end_line}"


def bm25_query(text: str) -> str | None:
    """An FTS5 query matching any of the question's words (stopwords dropped),
    each quoted so no word is an operator."""
    words = [w.lower() for w in _WORD.findall(text)]
    kept = [w for w in words if w not in STOPWORDS] or words
    unique = list(dict.fromkeys(kept))
    return " OR ".join(f'"{w}"' for w in unique) if unique else None


def rrf(rankings: list[list[int]], *, k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: (id, sum of 1 / (k + rank)), best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


@dataclass
class _Matrix:
    generation: int
    ids: np.ndarray
    vectors: mx.array


class Retriever:
    def __init__(self, documents: Documents, embedder: Embedder) -> None:
        self.documents = documents
        self.embedder = embedder
        self._matrices: dict[int, _Matrix] = {}

    def matrix(self, collection_id: int) -> _Matrix:
        """The collection's vectors in MLX, reloaded only when it changed."""
        held = self._matrices.get(collection_id)
        if held is not None and held.generation == self.documents.generation(collection_id):
            return held
        generation, ids, blob = self.documents.vectors(collection_id)
        dims = self.embedder.dims
        flat = np.frombuffer(blob, "<f2").reshape(len(ids), dims) if ids else \
            np.zeros((0, dims), np.float16)
        held = _Matrix(generation, np.asarray(ids, np.int64), mx.array(flat))
        self._matrices[collection_id] = held
        return held

    def dense(self, collection_id: int, query: str, limit: int) -> list[tuple[int, float]]:
        held = self.matrix(collection_id)
        if not len(held.ids):
            return []
        q = mx.array(self.embedder.embed([query])[0].astype(np.float16))
        scores = held.vectors @ q
        n = min(limit, len(held.ids))
        top = mx.argpartition(-scores, kth=n - 1)[:n] if n < len(held.ids) else mx.arange(n)
        rows = np.array(top)
        values = np.array(scores[top].astype(mx.float32))
        order = np.argsort(-values, kind="stable")
        return [(int(held.ids[rows[j]]), float(values[j])) for j in order]

    def bm25(self, collection_id: int, query: str, limit: int) -> list[tuple[int, float]]:
        match = bm25_query(query)
        return self.documents.bm25(collection_id, match, limit) if match else []

    def search(self, name: str, query: str, *, k: int = 5, mode: str = "hybrid") -> list[Hit]:
        if not query.strip():
            raise DocsError("The search query is empty.")
        if mode not in MODES:
            raise DocsError(f"Unknown search mode {mode!r} ({', '.join(MODES)}).")
        if k < 1:
            raise DocsError("Ask for at least one result (k >= 1).")
        info = self.documents.get(name)
        lexical = self.bm25(info.id, query, CANDIDATES) if mode != "dense" else []
        dense = self.dense(info.id, query, CANDIDATES) if mode != "bm25" else []
        if mode == "hybrid":
            ranked = rrf([[i for i, _ in lexical], [i for i, _ in dense]])
        else:
            ranked = lexical or dense
        ranked = ranked[:k]
        bm25_ranks = {cid: r for r, (cid, _) in enumerate(lexical, 1)}
        dense_ranks = {cid: r for r, (cid, _) in enumerate(dense, 1)}
        chunks = {c.id: c for c in self.documents.chunks([cid for cid, _ in ranked])}
        return [_hit(chunks[cid], score, bm25_ranks.get(cid), dense_ranks.get(cid))
                for cid, score in ranked if cid in chunks]


def _hit(chunk: StoredChunk, score: float, bm25_rank, dense_rank) -> Hit:
    return Hit(chunk_id=chunk.id, path=chunk.path, start_line=chunk.start_line,
               end_line=chunk.end_line, heading=chunk.heading, text=chunk.text,
               tokens=chunk.token_count, score=score, bm25_rank=bm25_rank,
               dense_rank=dense_rank, stale=staleness(chunk))


def staleness(chunk: StoredChunk) -> str | None:
    """Whether the chunk's file is gone or changed since it was indexed."""
    try:
        info = os.stat(chunk.path)
    except OSError:
        return "file deleted since indexing"
    if info.st_size != chunk.file_size or info.st_mtime_ns != chunk.file_mtime_ns:
        return "file changed since indexing"
    return None
