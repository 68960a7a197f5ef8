"""Hybrid search on a small corpus written here, with the bundled MiniLM:
the expected chunk comes first, by words and by meaning; a chunk whose file
changed or went says so; the matrix is reloaded only when the collection changes."""

from __future__ import annotations

import pytest

from mlxchat.docs import DocsError, Indexer, Retriever
from mlxchat.docs.embedder import default_embedder
from mlxchat.docs.search import bm25_match, query_words, rrf

CORPUS = {
    "garden.md": "# Garden\n\nTomatoes need six hours of sun and regular watering in summer.\n\n"
                 "## Pests\n\nAphids on roses can be washed off with soapy water.\n",
    "bikes.md": "# Bicycle care\n\nOil the chain every few hundred kilometres and check "
                "tyre pressure weekly.\n",
    "kitchen.rst": "Bread\n=====\n\nKnead the dough for ten minutes, then let it rise "
                   "until doubled in size.\n",
}


@pytest.fixture(scope="module")
def embedder():
    return default_embedder()


@pytest.fixture
def indexed(tmp_path, store, embedder):
    for name, text in CORPUS.items():
        (tmp_path / name).write_text(text)
    Indexer(store.documents, embedder).add("home", [tmp_path])
    return tmp_path, Retriever(store.documents, embedder)


@pytest.mark.parametrize("query,mode,want", [
    ("how often should I lubricate my bike", "dense", "bikes.md"),
    ("aphids roses", "bm25", "garden.md"),
    ("making a loaf: how long to work the dough", "hybrid", "kitchen.rst"),
    ("insects on my flowers", "hybrid", "garden.md"),
])
def test_the_expected_chunk_comes_first(indexed, query, mode, want):
    root, retriever = indexed
    hits = retriever.search("home", query, k=3, mode=mode)
    assert hits[0].path == str(root / want), [h.place for h in hits]
    assert hits[0].stale is None


def test_a_hit_keeps_its_place_and_says_when_its_file_changed(indexed):
    root, retriever = indexed
    hit = retriever.search("home", "aphids soapy water", k=1)[0]
    # A short file is one chunk: the whole of it, under its first heading.
    assert (hit.place, hit.heading) == (f"{root}/garden.md:1-7", "Garden")
    (root / "garden.md").write_text("rewritten, and longer than before")
    assert retriever.search("home", "aphids soapy water", k=1)[0].stale == \
        "file changed since indexing"
    (root / "garden.md").unlink()
    assert retriever.search("home", "aphids soapy water", k=1)[0].stale == \
        "file deleted since indexing"


def test_the_matrix_is_loaded_once_and_again_after_a_change(indexed, store):
    root, retriever = indexed
    info = store.documents.get("home")
    first = retriever.matrix(info.id)
    assert retriever.matrix(info.id) is first and first.columns.shape == (384, info.chunks)
    (root / "new.txt").write_text("A brand new note about sailing boats.\n")
    Indexer(store.documents, retriever.embedder).update("home")
    assert retriever.matrix(info.id) is not first
    assert retriever.search("home", "sailing", k=1)[0].path == str(root / "new.txt")


def test_bad_queries_and_the_fusion_rules(indexed):
    _, retriever = indexed
    for query, kwargs, message in (("  ", {}, "empty"), ("x", {"k": 0}, "at least one"),
                                   ("x", {"mode": "fuzzy"}, "Unknown search mode")):
        with pytest.raises(DocsError, match=message):
            retriever.search("home", query, **kwargs)
    # Words, never operators:
    assert bm25_match(query_words('what is "OR" (near) the* near')) == '"near"'
    assert bm25_match(query_words("The AND")) == '"the" OR "and"'  # only stopwords: kept
    fused = rrf([[1, 2, 3], [3, 1]])
    assert [i for i, _ in fused] == [1, 3, 2]


def test_a_term_written_as_code_is_a_third_vote(tmp_path, store, embedder):
    """The embedder reads `--kv-budget` as common word pieces and ranks the
    chunk that holds it last; BM25 spreads the question over its words. The
    term matched as a phrase puts the chunk that explains it first (issue 47:
    the answer was BM25's first and the fusion's 24th)."""
    from mlxchat.docs.search import exact_terms

    corpus = {
        "serve.md": "# Serving\n\n## Disk budget\n\nThe API sessions' files are kept within "
                    "`--kv-budget SIZE` (default 8G); the least recently used session loses "
                    "its files first.\n",
        "memory.md": "# Memory\n\nThe KV cache budget: the budget says how much memory the KV "
                     "cache may take, and the gauge shows the budget and the KV bytes. A KV "
                     "budget too small drops old turns.\n",
        "flags.md": "# Flags of the serve command\n\nThe serve command takes flags for the "
                    "host, the port and the model; each flag of mlxchat serve has a default.\n",
    }
    for name, text in corpus.items():
        (tmp_path / name).write_text(text)
    Indexer(store.documents, embedder).add("n", [tmp_path])
    question = "What does the --kv-budget flag of mlxchat serve do?"
    assert exact_terms(question) == ["--kv-budget"]
    assert exact_terms("mlx.core on 127.0.0.1:8000, kv_bits and --temp") == [
        "mlx.core", "127.0.0.1:8000", "--temp"]
    hits = Retriever(store.documents, embedder).search("n", question, k=3)
    assert hits[0].path.endswith("serve.md"), [(h.path, h.bm25_rank, h.dense_rank) for h in hits]


def test_a_chunk_the_other_sides_found_keeps_its_rank_on_the_dense_side(indexed, store):
    root, retriever = indexed
    info = store.documents.get("home")
    question = "how often should I lubricate my bike"
    full = [cid for cid, _ in retriever.dense(info.id, question, 10)]
    assert len(full) == info.chunks >= 3
    ranked = retriever.dense(info.id, question, 1, also=set(full[1:]))
    assert {cid: rank for cid, _, rank in ranked} == {cid: n for n, cid in enumerate(full, 1)}
