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
