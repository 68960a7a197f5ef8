"""Recall@5 and MRR of the hybrid search with and without diversity across
files, on a question set's index kept between runs (``--cache``).

A question is answered when a chunk of its file (in the ``docs`` set: one
holding its passage) is among the top 5 hits (recall@5); MRR is the mean of 1 / the rank of the first hit from that file
among the top 10 (0 when none is). ``sent`` is the same recall over what a
message would send: every hit the search fused, the relevance floor,
identical texts once, then the first 5 (as ``session/retrieval.py`` does
with docs_k 5, a budget aside).
The last line is:
ratios: recall_at_5_flat=X mrr_flat=X recall_at_5=X mrr=X sent_recall_at_5=X
        recall_gain=X chunks=X heading_only_chunks=X max_chunk_pieces=X
"flat" ranks by the fused score alone (same-file decay 1, as before); the
others spread hits across files (``mlxchat.docs.diversity``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see bench/retrieval.py

import argparse  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from retrieval_corpora import SETS, docs_set, indexed, modules_set, topics_set  # noqa: E402

from mlxchat.docs import Retriever  # noqa: E402
from mlxchat.docs.diversity import SAME_FILE_DECAY  # noqa: E402
from mlxchat.docs.embedder import default_embedder  # noqa: E402
from mlxchat.docs.search import CANDIDATES  # noqa: E402
from mlxchat.store import open_store  # noqa: E402

DEPTH = 10
"""Hits looked at for MRR (and for what a message chooses from)."""


def question_set(name: str):
    if name == "topics":
        from retrieval import QUESTIONS

        return topics_set(QUESTIONS)
    return docs_set() if name == "docs" else modules_set()


def first_rank(hits, qs, stem: str, question: str) -> int | None:
    return next((n for n, h in enumerate(hits, 1) if qs.answers(h, stem, question)), None)


def measure(retriever: Retriever, qs, *, show_misses: bool) -> dict[str, float]:
    from mlxchat.docs.relevance import by_text, relevant

    found = sent = 0
    rr = 0.0
    for stem, question in qs.questions:
        every = retriever.search(qs.name, question, k=2 * CANDIDATES)
        hits = every[:DEPTH]
        rank = first_rank(hits, qs, stem, question)
        found += rank is not None and rank <= 5
        rr += 1 / rank if rank else 0.0
        chosen = [g.hit for g in by_text(relevant(every))][:5]
        sent += first_rank(chosen, qs, stem, question) is not None
        if show_misses and (rank is None or rank > 5):
            print(f"  miss {stem}: {question!r} -> "
                  f"{', '.join(Path(h.place).name for h in hits[:5])}")
    n = len(qs.questions)
    return {"recall": found / n, "mrr": rr / n, "sent": sent / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=SETS, default="topics")
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder keeping the corpus and its index between runs")
    parser.add_argument("--index-only", action="store_true")
    parser.add_argument("--misses", action="store_true", help="print each miss's top 5")
    parser.add_argument("--decays", type=float, nargs="*", default=[],
                        help="other same-file decays to measure beside 1 (flat) and the default")
    args = parser.parse_args()
    qs = question_set(args.set)
    embedder = default_embedder()
    root = args.cache or Path(tempfile.mkdtemp(prefix="mlxchat-ranking-"))
    root.mkdir(parents=True, exist_ok=True)
    store = open_store(root / f"{qs.name}.db")
    report, seconds, reused = indexed(qs, root, store, embedder)
    info = store.documents.get(qs.name)
    print(f"{qs.name}: {len(qs.texts)} files, {info.chunks} chunks, {len(qs.questions)} "
          f"questions; {'updated' if reused else 'indexed'} in {seconds:.1f} s "
          f"({report.files_indexed} files read); load {os.getloadavg()[0]:.1f}")
    if args.index_only:
        return
    results = {}
    for decay in dict.fromkeys([1.0, SAME_FILE_DECAY, *args.decays]):
        retriever = Retriever(store.documents, embedder, same_file_decay=decay)
        results[decay] = figures = measure(retriever, qs, show_misses=args.misses)
        print(f"same-file decay {decay:g}{' (flat)' if decay == 1 else ''}"
              f"{' (default)' if decay == SAME_FILE_DECAY else ''}: "
              f"recall@5 {figures['recall']:.3f}  MRR@{DEPTH} {figures['mrr']:.3f}  "
              f"sent recall@5 {figures['sent']:.3f}")
    pieces = largest_chunk(store, info.id, embedder)
    alone = headings_alone(store, info.id)
    store.close()
    flat, spread = results[1.0], results[SAME_FILE_DECAY]
    gain = spread["recall"] / flat["recall"] if flat["recall"] else float("nan")
    print(f"ratios: recall_at_5_flat={flat['recall']:.3f} mrr_flat={flat['mrr']:.3f} "
          f"recall_at_5={spread['recall']:.3f} mrr={spread['mrr']:.3f} "
          f"sent_recall_at_5={spread['sent']:.3f} recall_gain={gain:.3f} "
          f"chunks={info.chunks} heading_only_chunks={alone} max_chunk_pieces={pieces} "
          f"(embedder reads {embedder.reads})")


def largest_chunk(store, collection_id: int, embedder) -> int:
    """The most word pieces the embedder reads of one chunk (heading included)."""
    from mlxchat.docs.chunking import HEADING_PIECES
    from mlxchat.docs.indexer import embedding_text

    pieces = embedder.word_pieces
    ids = store.documents.vectors(collection_id)[1]
    texts = [embedding_text(pieces.tail(c.heading, HEADING_PIECES), c.text)
             for c in store.documents.chunks(ids)]
    return max(pieces.count(texts), default=0)


_ADORNMENT = re.compile(r"([=\-~^*+#`'\":.])\1{2,}")


def headings_alone(store, collection_id: int) -> int:
    """Chunks that hold nothing but headings (Markdown's, or a title over or
    under a reStructuredText adornment)."""
    count = 0
    for chunk in store.documents.chunks(store.documents.vectors(collection_id)[1]):
        lines = [line.strip() for line in chunk.text.split("\n") if line.strip()]
        plain = [line for line in lines if not _ADORNMENT.fullmatch(line)]
        count += all(line.startswith("#") for line in plain) or (
            len(plain) == 1 and len(lines) > 1)
    return count


if __name__ == "__main__":
    main()
