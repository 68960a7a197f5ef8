"""Hybrid search over a collection: BM25 (FTS5) and dense (MLX), fused by
reciprocal rank, then spread across files (``docs.diversity``) so one long
document cannot fill the top k.

The dense side keeps one matrix per collection in MLX, loaded on the first
search and again only when the collection's generation changes. It is held
transposed (dims, chunks) and multiplied as a one-row product: on Linux's
CPU-only MLX that runs in float32 at 21-37 ms for 100,000 chunks, where the
stored float16 took 120-200 ms and ``matrix @ query`` 128-206 ms even in
float32 (measured on this 2-core machine at load 0.8-1.4). A GPU keeps
float16, half the bytes to read.

The BM25 side matches only the question's rarer words: scoring every chunk
that holds any word of the question cost ~2 us a chunk (160-280 ms over
100,000), and a word in most chunks adds almost nothing to BM25 (its IDF is
near zero). Keeping the rarest words while they match at most 20% of the
chunks kept recall@5 on the bench's questions (BM25 0.74, hybrid 0.86, as
unpruned) where keeping only words in at most 5% of chunks lost some (0.64,
0.78); over 100,000 chunks the BM25 side takes 35 ms at p95 (load 4).
Words are counted in the searched collection (the store narrows the counts and
the match to it beside larger collections): counted over the whole index, a
480-chunk collection beside a 100,000-chunk one lost 27% of its BM25 hits.

A question that writes a term as code (``--kv-budget``, ``mlx.core``) gets a
third ranking in the fusion: BM25 over those terms alone, each matched as a
phrase. The embedder reads such a term as a few common word pieces, so the
dense side rarely ranks the chunks that hold it; BM25 alone gave "What does
the --kv-budget flag of mlxchat serve do?" its answer first and the fusion
then ranked it 24th.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable

import mlx.core as mx
import numpy as np

from mlxchat.docs.diversity import SAME_FILE_DECAY, spread
from mlxchat.docs.embedder import Embedder
from mlxchat.docs.errors import DocsError
from mlxchat.store.documents import CollectionInfo, Documents, StoredChunk

RRF_K = 60
CANDIDATES = 50
"""Hits each side contributes to the fusion."""
MODES = ("hybrid", "bm25", "dense")
BM25_BUDGET = 20_000
"""Chunks a BM25 query may match, summed over its words (~40 ms to score on
this CPU): the rarest words are kept while they fit, the rarest always."""
MAX_TERMS = 8
"""The rarest words a BM25 query keeps."""
STOPWORDS = frozenset("""a an and are as at be by can do does for from how i if in into is it
its me my of on or so than that the their them then there these this to was we what when
where which who whom why will with you your""".split())
_WORD = re.compile(r"\w+")
_TERM = re.compile(r"--\w+(?:[-.]\w+)*|\w+(?:[-./:]\w+)+")
"""A term written as code: a flag (``--kv-budget``), a dotted or hyphenated
name (``mlx.core``, ``127.0.0.1:8000``)."""


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
    """The fused score (hybrid), the BM25 score or the cosine similarity. The
    first hit scores best; later ones are in spread order, not by score."""
    bm25_rank: int | None
    dense_rank: int | None
    stale: str | None = None
    """Why the file no longer matches what was indexed (deleted, changed), if so."""
    similarity: float | None = None
    """The cosine similarity to the question, when the dense side ranked it."""

    @property
    def place(self) -> str:
        return f"{self.path}:{self.start_line}-{self.end_line}"


def query_words(text: str) -> list[str]:
    """The question's words, lower-cased, once each, stopwords dropped
    (kept when they are all there is)."""
    words = [w.lower() for w in _WORD.findall(text)]
    kept = [w for w in words if w not in STOPWORDS] or words
    return list(dict.fromkeys(kept))


def exact_terms(text: str) -> list[str]:
    """The question's terms written as code, once each (``exact_terms``'s side
    of the search matches each as a phrase: its words in that order)."""
    return list(dict.fromkeys(m.group(0).lower() for m in _TERM.finditer(text)))


def phrase(word: str) -> str:
    """A word quoted for FTS5, so it is never an operator."""
    return f'"{word}"'


def bm25_match(words: list[str]) -> str | None:
    """An FTS5 query matching any of the words."""
    return " OR ".join(phrase(w) for w in words) if words else None


def rarest_terms(words: list[str], counts: list[int], *, budget: int, most: int) -> list[str]:
    """The words to match, rarest first: at most ``most`` of those found, while
    their chunk counts sum to at most ``budget``; the rarest found one always."""
    kept: list[str] = []
    spent = 0
    for n, i in sorted((n, i) for i, n in enumerate(counts) if n > 0)[:most]:
        if kept and spent + n > budget:
            break
        kept.append(words[i])
        spent += n
    return kept


def rrf(rankings: list[list[int]] | list[dict[int, int]], *,
        k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: (id, sum of 1 / (k + rank)), best first. A
    ranking is a list (best first) or each id's rank."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        ranks = ranking if isinstance(ranking, dict) else {
            item: rank for rank, item in enumerate(ranking, 1)}
        for item, rank in ranks.items():
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def matrix_dtype() -> mx.Dtype:
    """float32 on the CPU (MLX's float16 products there are 4-6x slower), else float16."""
    return mx.float16 if mx.default_device() == mx.gpu else mx.float32


@dataclass
class _Matrix:
    generation: int
    ids: np.ndarray
    columns: mx.array
    """(dims, chunks), contiguous: one column per chunk."""


class Retriever:
    def __init__(self, documents: Documents, embedder: Embedder, *,
                 bm25_budget: int = BM25_BUDGET, max_terms: int = MAX_TERMS,
                 same_file_decay: float = SAME_FILE_DECAY) -> None:
        self.documents = documents
        self.embedder = embedder
        self.bm25_budget = bm25_budget
        self.max_terms = max_terms
        self.same_file_decay = same_file_decay
        """How far each chunk of a file already ranked pushes the next one down
        (``docs.diversity``); 1 ranks by score alone."""
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
        columns = mx.contiguous(mx.array(flat).T.astype(matrix_dtype()))
        mx.eval(columns)
        held = _Matrix(generation, np.asarray(ids, np.int64), columns)
        self._matrices[collection_id] = held
        return held

    def _scores(self, collection_id: int, query: str) -> tuple[_Matrix, mx.array] | None:
        """The collection's matrix and every chunk's cosine to the query."""
        held = self.matrix(collection_id)
        if not len(held.ids):
            return None
        q = mx.array(self.embedder.embed([query])[0]).astype(held.columns.dtype)
        return held, (q[None] @ held.columns)[0]

    def dense(self, collection_id: int, query: str, limit: int, *,
              also: set[int] | None = None) -> list[tuple[int, float, int]]:
        """The ``limit`` chunks nearest the query as (id, cosine), best first;
        with ``also``, (id, cosine, rank) of those and of each chunk in ``also``
        among every chunk: one the other sides found keeps its place on this
        side (62nd, not absent)."""
        scored = self._scores(collection_id, query)
        if scored is None:
            return []
        held, scores = scored
        n = min(limit, len(held.ids))
        top = mx.argpartition(-scores, kth=n - 1)[:n] if n < len(held.ids) else mx.arange(n)
        rows = np.array(top)
        values = np.array(scores[top].astype(mx.float32))
        order = np.argsort(-values, kind="stable")
        nearest = [(int(held.ids[rows[j]]), float(values[j])) for j in order]
        if also is None:
            return nearest  # type: ignore[return-value]
        ranked = [(cid, cos, r) for r, (cid, cos) in enumerate(nearest, 1)]
        columns = np.searchsorted(held.ids, sorted(also - {cid for cid, _ in nearest}))
        columns = columns[(columns < len(held.ids))]
        columns = [int(c) for c in columns if int(held.ids[c]) in also]
        if columns:
            picked = scores[mx.array(columns)]
            above = np.array((scores[None, :] > picked[:, None]).sum(axis=1))
            ranked += [(int(held.ids[c]), float(cos), int(n) + 1) for c, n, cos in
                       zip(columns, above, np.array(picked.astype(mx.float32)))]
        return ranked

    def likeness(self, collection_id: int, ids) -> Callable[[int, int], float] | None:
        """The cosine of two of ``ids``' embeddings (None: a chunk not held)."""
        held = self.matrix(collection_id)
        wanted = sorted(ids)
        columns = np.searchsorted(held.ids, wanted) if len(held.ids) else np.array([], int)
        if len(wanted) != len(columns) or any(
                c >= len(held.ids) or held.ids[c] != i for c, i in zip(columns, wanted)):
            return None
        vectors = np.array(held.columns[:, mx.array(columns)].astype(mx.float32)) \
            if wanted else np.zeros((0, 0), np.float32)
        gram = vectors.T @ vectors
        at = {cid: n for n, cid in enumerate(wanted)}
        return lambda a, b: float(gram[at[a], at[b]])

    def bm25(self, info: CollectionInfo, query: str, limit: int) -> list[tuple[int, float]]:
        match = bm25_match(self.bm25_words(info, query))
        return self.documents.bm25(info, match, limit) if match else []

    def bm25_words(self, info: CollectionInfo, query: str) -> list[str]:
        """The question's words that BM25 matches: every one where the
        collection fits the budget, else the rarest in it (see ``rarest_terms``)."""
        words = query_words(query)
        if len(words) <= self.max_terms and info.chunks <= self.bm25_budget:
            return words
        phrases = [phrase(w) for w in words]
        counts = self.documents.match_counts(info, phrases, cap=self.bm25_budget + 1)
        if any(counts) and all(n == 0 or n > self.bm25_budget for n in counts):
            # Every word found is over the budget (counted to the cap): which is rarest?
            counts = self.documents.match_counts(info, phrases)
        return rarest_terms(words, counts, budget=self.bm25_budget, most=self.max_terms)

    def exact(self, info: CollectionInfo, query: str, limit: int) -> list[tuple[int, float]]:
        """BM25 over the question's terms written as code, each matched as a
        phrase: a third vote in the fusion for the chunks that hold one."""
        terms = exact_terms(query)
        return self.documents.bm25(info, bm25_match(terms), limit) if terms else []

    def search(self, name: str, query: str, *, k: int = 5, mode: str = "hybrid") -> list[Hit]:
        if not query.strip():
            raise DocsError("The search query is empty.")
        if mode not in MODES:
            raise DocsError(f"Unknown search mode {mode!r} ({', '.join(MODES)}).")
        if k < 1:
            raise DocsError("Ask for at least one result (k >= 1).")
        info = self.documents.get(name)
        lexical = self.bm25(info, query, CANDIDATES) if mode != "dense" else []
        exact = self.exact(info, query, CANDIDATES) if mode == "hybrid" else []
        found = {i for i, _ in lexical} | {i for i, _ in exact}
        dense = self.dense(info.id, query, CANDIDATES, also=found) if mode != "bm25" else []
        dense_ranks = {cid: (rank, cos) for cid, cos, rank in dense}
        fused = rrf([ranks for ranks in (
            {i: r for r, (i, _) in enumerate(lexical, 1)},
            {i: r for i, (r, _) in dense_ranks.items()},
            {i: r for r, (i, _) in enumerate(exact, 1)}) if ranks])
        scores = dict(fused) if mode == "hybrid" else \
            dict(lexical or [(cid, cos) for cid, cos, _ in dense])
        chunks = {c.id: c for c in self.documents.chunks([cid for cid, _ in fused])}
        order = spread(fused, {cid: c.path for cid, c in chunks.items()},
                       decay=self.same_file_decay, similarity=self.likeness(info.id, chunks))
        bm25_ranks = {cid: r for r, (cid, _) in enumerate(lexical, 1)}
        top = [cid for cid in order if cid in chunks][:k]
        return [_hit(chunks[cid], scores[cid], bm25_ranks.get(cid), dense_ranks.get(cid))
                for cid in top]


def _hit(chunk: StoredChunk, score: float, bm25_rank: int | None,
         dense: tuple[int, float] | None) -> Hit:
    return Hit(chunk_id=chunk.id, path=chunk.path, start_line=chunk.start_line,
               end_line=chunk.end_line, heading=chunk.heading, text=chunk.text,
               tokens=chunk.token_count, score=score, bm25_rank=bm25_rank,
               dense_rank=dense[0] if dense else None, stale=staleness(chunk),
               similarity=dense[1] if dense else None)


def staleness(chunk: StoredChunk) -> str | None:
    """Whether the chunk's file is gone or changed since it was indexed."""
    try:
        info = os.stat(chunk.path)
    except OSError:
        return "file deleted since indexing"
    if info.st_size != chunk.file_size or info.st_mtime_ns != chunk.file_mtime_ns:
        return "file changed since indexing"
    return None
