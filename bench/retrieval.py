"""Retrieval over document collections: recall on Python's language reference
topics, query time over 100,000 chunks, indexing and re-indexing speed.

The corpus is `pydoc_data.topics` (present with every Python), one file per
topic; the questions below are written by hand, paraphrased, each with the
topic that answers it. Recall@5: the topic's file is among the top 5 chunks.
The corpus is small, so BM25 keeps every word of a question there; the
``_pruned`` recalls scale BM25's budget to it as 20,000 is to 100,000 chunks
(rarest words first while they match at most 20% of the chunks), to show what
the pruning a large collection gets costs in recall; ``_beside_100k`` is
BM25's recall on the topics once the 100,000-chunk collection shares the index.
MRR is the mean of 1 / the rank of the first hit from the topic's file among
the top 10 (0 when none is there). ``--cache DIR`` keeps the corpus and its
index in DIR between runs (``bench/retrieval_corpora.py``): a second run only
checks the files (the indexing figures are then those of that check).
The last line is:
ratios: recall_at_5=X mrr=X recall_at_5_bm25=X recall_at_5_dense=X hybrid_gain=X
        recall_at_5_pruned=X recall_at_5_bm25_pruned=X recall_at_5_bm25_beside_100k=X
        query_ms_100k=X
        bm25_ms_100k=X dense_ms_100k=X index_chunks_per_s=X reindex_unchanged_s=X
        reindex_share=X mlx_embed_slowdown=X
"""

from __future__ import annotations

import os

# One BLAS thread: on a shared 2-core machine OpenBLAS's spinning threads made
# small products 100x slower (measured); set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from mlxchat.docs import Indexer, Retriever  # noqa: E402
from mlxchat.docs.diversity import SAME_FILE_DECAY  # noqa: E402
from mlxchat.docs.embedder import default_embedder, load_embedder  # noqa: E402
from mlxchat.docs.indexer import vector_blobs  # noqa: E402
from mlxchat.docs.search import BM25_BUDGET, CANDIDATES, MODES  # noqa: E402
from mlxchat.store import open_store  # noqa: E402
from mlxchat.store.documents import FileUpdate, NewChunk  # noqa: E402

QUESTIONS = [
    ("assert", "How can I add a debugging check that fails when a condition is false?"),
    ("assignment", "How do I unpack a tuple into several variables in one statement?"),
    ("async", "How do I write a coroutine function and iterate asynchronously?"),
    ("augassign", "What does x += 1 do compared with x = x + 1?"),
    ("await", "How do I suspend a coroutine until an awaitable object finishes?"),
    ("break", "How do I leave a loop early before it has finished?"),
    ("continue", "How do I skip the rest of this loop iteration and go on to the next?"),
    ("class", "How do I define a new class with base classes and a body?"),
    ("comparisons", "How do chained comparisons like a < b < c get evaluated?"),
    ("context-managers", "Which methods must an object provide to manage entering and "
                         "exiting a runtime context?"),
    ("del", "How do I remove a name binding or delete an item from a list?"),
    ("dict", "How do I write a mapping display with key value pairs in braces?"),
    ("exceptions", "What happens when an error is raised and how does the interpreter "
                   "look for a handler?"),
    ("for", "How do I loop over the items of a sequence one by one?"),
    ("formatstrings", "What is the mini-language for padding, alignment and precision "
                      "when formatting values?"),
    ("function", "How do I define a function with default parameter values and "
                 "annotations?"),
    ("global", "How can code inside a function assign to a module-level variable?"),
    ("nonlocal", "How do I rebind a variable of an enclosing function from a nested one?"),
    ("if", "How do I choose between alternatives with elif and else branches?"),
    ("import", "How does Python find and load a module when I bring it in by name?"),
    ("lambda", "How do I create a small anonymous function inside an expression?"),
    ("pass", "Which statement does nothing and serves as a placeholder?"),
    ("raise", "How do I throw an exception and chain it to another one?"),
    ("return", "How does a function hand a result back to its caller?"),
    ("try", "How do I catch errors and always run clean-up code afterwards?"),
    ("while", "How do I repeat a block for as long as a condition stays true?"),
    ("yield", "How does a generator function produce values one at a time?"),
    ("slicings", "How do I take a range of items from a sequence with start, stop and step?"),
    ("lists", "How do I write a list display in square brackets?"),
    ("booleans", "How do the and, or and not operators evaluate their operands?"),
    ("truth", "Which values count as false when tested in an if condition?"),
    ("string-methods", "Which method splits text into words or turns it to upper case?"),
    ("typesmapping", "What methods do dictionaries offer, such as get, setdefault and "
                     "update?"),
    ("typesseq-mutable", "Which operations change a list in place, like append and extend?"),
    ("specialattrs", "What are attributes like __dict__ and __class__ that every object has?"),
    ("customization", "How can I control how my object is shown by repr and str?"),
    ("attribute-access", "How can my class intercept lookups of attributes that are missing?"),
    ("numeric-types", "Which special methods let my objects support arithmetic operators "
                      "like addition?"),
    ("sequence-types", "How do I make my own container support len() and indexing?"),
    ("identifiers", "Which characters may a variable name contain, and which words are "
                    "reserved?"),
    ("integers", "How do I write whole-number literals in hexadecimal, octal or binary?"),
    ("floating", "How do I write a floating point literal with an exponent?"),
    ("strings", "How do I write raw string literals and escape sequences like a newline?"),
    ("operator-summary", "Which operators bind more tightly than others? Give the "
                         "precedence table."),
    ("naming", "How are names bound and resolved in nested scopes and code blocks?"),
    ("debugger", "What commands does the interactive debugger have for stepping through "
                 "code?"),
    ("power", "What does the ** operator do with negative exponents?"),
    ("shifting", "What do the << and >> operators do to integers?"),
    ("imaginary", "How do I write a complex number literal?"),
    ("typesseq", "What operations do all sequences share, like in, concatenation and "
                 "repetition?"),
]


COLLECTION = "topics"
MRR_DEPTH = 10


def ranks(retriever: Retriever, mode: str) -> list[int | None]:
    """Each question's rank of the first hit from its topic's file (None past
    the top ``MRR_DEPTH``)."""
    found = []
    for topic, question in QUESTIONS:
        hits = retriever.search(COLLECTION, question, k=MRR_DEPTH, mode=mode)
        found.append(next((n for n, h in enumerate(hits, 1) if Path(h.path).stem == topic),
                          None))
    return found


def recall(retriever: Retriever, mode: str) -> float:
    return sum(r is not None and r <= 5 for r in ranks(retriever, mode)) / len(QUESTIONS)


def mrr(retriever: Retriever, mode: str) -> float:
    return sum(1 / r for r in ranks(retriever, mode) if r) / len(QUESTIONS)


def synthetic(store, embedder, n_chunks: int) -> float:
    """A collection of ``n_chunks`` made-up chunks (words from the corpus, random
    unit vectors); the seconds it took to write."""
    from pydoc_data.topics import topics

    words = np.array(" ".join(topics.values()).split())
    rng = np.random.default_rng(0)
    info = store.documents.create("synthetic", [], embedder=embedder.name, dims=embedder.dims)
    started = time.perf_counter()
    per_file = 100
    for f in range(n_chunks // per_file):
        vectors = rng.normal(size=(per_file, embedder.dims)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        chunks = [NewChunk(1, 10, "", " ".join(rng.choice(words, 120)), 150, blob)
                  for blob in vector_blobs(vectors)]
        store.documents.replace_files(info.id, [(FileUpdate(f"/synthetic/{f}.txt", "text",
                                                            1, 1, "0", 0), chunks)])
    return time.perf_counter() - started


def p95_ms(call) -> float:
    """p95 over the questions of ``call(question)``, in ms."""
    times = []
    for _, question in QUESTIONS:
        started = time.perf_counter()
        call(question)
        times.append((time.perf_counter() - started) * 1000)
    return float(np.percentile(times, 95))


def query_figures(retriever: Retriever, name: str) -> dict[str, float]:
    """ms: loading the matrix (the first search), then p95 of each side and of
    the whole search."""
    info = retriever.documents.get(name)
    started = time.perf_counter()
    retriever.search(name, QUESTIONS[0][1], k=5)
    return {"first": (time.perf_counter() - started) * 1000,
            "bm25": p95_ms(lambda q: retriever.bm25(info, q, CANDIDATES)),
            "dense": p95_ms(lambda q: retriever.dense(info.id, q, CANDIDATES)),
            "search": p95_ms(lambda q: retriever.search(name, q, k=5))}


def embedding_slowdown(store, sample: int) -> float:
    """MLX's embedding time over numpy's on the first ``sample`` chunks."""
    texts = [c.text for c in store.documents.chunks(list(range(1, sample + 1)))]
    if not texts:
        return float("nan")
    seconds = {}
    for backend in ("numpy", "mlx"):
        other = load_embedder(backend=backend)
        started = time.perf_counter()
        other.embed(texts)
        seconds[backend] = time.perf_counter() - started
    ratio = seconds["mlx"] / seconds["numpy"]
    print(f"embedding {len(texts)} chunks: numpy {seconds['numpy']:.2f} s, "
          f"mlx {seconds['mlx']:.2f} s (mlx/numpy {ratio:.1f}); load now {os.getloadavg()[0]:.1f}")
    return ratio


def recalls(store, embedder, decay: float) -> tuple[dict[str, float], dict[str, float]]:
    """Recall@5 of each mode (and the hybrid's MRR), and of those BM25 takes
    part in with its words pruned."""
    retriever = Retriever(store.documents, embedder, same_file_decay=decay)
    scores = {mode: recall(retriever, mode) for mode in ("hybrid", "bm25", "dense")}
    scores["mrr"] = mrr(retriever, "hybrid")
    scaled = BM25_BUDGET * store.documents.get(COLLECTION).chunks // 100_000
    pruning = Retriever(store.documents, embedder, bm25_budget=scaled, same_file_decay=decay)
    pruned = {mode: recall(pruning, mode) for mode in ("hybrid", "bm25")}
    for mode in MODES:
        also = f" (BM25 words pruned: {pruned[mode]:.3f})" if mode in pruned else ""
        print(f"recall@5 {mode}: {scores[mode]:.3f}{also}")
    print(f"MRR@{MRR_DEPTH} hybrid: {scores['mrr']:.3f}")
    return scores, pruned


def index_topics(root: Path, store, embedder):
    """The topics' collection (kept in ``root`` when it is a cache: reused),
    and the check of it unchanged: (report, check)."""
    from retrieval_corpora import indexed, topics_set

    report, seconds, reused = indexed(topics_set(QUESTIONS), root, store, embedder)
    how = "checked (the cached index)" if reused else "indexed"
    print(f"{how} {report.files_indexed} topics, {report.chunks_added} chunks in "
          f"{seconds:.1f} s ({report.chunks_per_s:.1f} chunks/s)")
    again = Indexer(store.documents, embedder).update(COLLECTION)
    print(f"re-index unchanged: {again.seconds * 1000:.1f} ms "
          f"({again.files_unchanged} files unchanged)")
    return report, again


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000, help="synthetic collection size")
    parser.add_argument("--mlx-sample", type=int, default=16,
                        help="chunks embedded with the MLX backend too, to compare its speed")
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder keeping the corpus and its index between runs")
    parser.add_argument("--same-file-decay", type=float, default=SAME_FILE_DECAY,
                        help="hits spread across files (mlxchat.docs.diversity); 1 ranks "
                             "by score alone, as before")
    args = parser.parse_args()
    embedder = default_embedder()
    print(f"embedder: {embedder.name}, backend {embedder.backend}, {len(QUESTIONS)} questions, "
          f"same-file decay {args.same_file_decay:g}; "
          f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.cache or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        store = open_store(root / "topics.db")
        report, again = index_topics(root, store, embedder)
        scores, pruned = recalls(store, embedder, args.same_file_decay)
        ratio = embedding_slowdown(store, args.mlx_sample)
        wrote = synthetic(store, embedder, args.chunks)
        print(f"synthetic collection: {args.chunks} chunks written in {wrote:.1f} s")
        retriever = Retriever(store.documents, embedder, same_file_decay=args.same_file_decay)
        beside = recall(retriever, "bm25")
        print(f"recall@5 bm25 of the topics beside the synthetic collection: {beside:.3f}")
        ms = query_figures(retriever, "synthetic")
        held = retriever.matrix(store.documents.get("synthetic").id).columns
        print(f"query over {args.chunks} chunks: first {ms['first']:.0f} ms (loads the "
              f"{held.dtype} matrix, {held.nbytes / 2**20:.0f} MiB), p95 {ms['search']:.0f} ms "
              f"(BM25 side {ms['bm25']:.0f} ms, dense side {ms['dense']:.0f} ms); "
              f"load {os.getloadavg()[0]:.1f}")
        store.documents.delete("synthetic")  # a kept index keeps only the topics
        store.close()
    best = max(scores["bm25"], scores["dense"])
    share = again.seconds / report.seconds if report.seconds else float("nan")
    print(f"ratios: recall_at_5={scores['hybrid']:.3f} mrr={scores['mrr']:.3f} "
          f"recall_at_5_bm25={scores['bm25']:.3f} "
          f"recall_at_5_dense={scores['dense']:.3f} hybrid_gain={scores['hybrid'] / best:.3f} "
          f"recall_at_5_pruned={pruned['hybrid']:.3f} "
          f"recall_at_5_bm25_pruned={pruned['bm25']:.3f} "
          f"recall_at_5_bm25_beside_100k={beside:.3f} query_ms_100k={ms['search']:.1f} "
          f"bm25_ms_100k={ms['bm25']:.1f} dense_ms_100k={ms['dense']:.1f} "
          f"index_chunks_per_s={report.chunks_per_s:.1f} "
          f"reindex_unchanged_s={again.seconds:.4f} reindex_share={share:.4f} "
          f"mlx_embed_slowdown={ratio:.1f}")


if __name__ == "__main__":
    main()
