"""What makes a query over a large collection fast, kept honest on a small one:
BM25 matches only the question's rarest words within a budget (dropping a
word found in every chunk leaves the order as it was), and the dense side's transposed float32
matrix scores as the stored vectors do."""

from __future__ import annotations

import numpy as np
import pytest

from mlxchat.docs import Indexer, Retriever
from mlxchat.docs.search import bm25_match, query_words, rarest_terms

N_FILES = 20


@pytest.fixture
def collection(tmp_path, store, tiny_embed):
    """20 one-chunk files of different lengths: "python" in each, "roses" in
    every fourth, "aphids" in two."""
    for i in range(N_FILES):
        words = ["python"] + ["garden"] * (i % 7) + ["note"] * (i % 3)
        words += ["roses"] * (i % 4 == 0) + ["aphids"] * (1 + i % 2) * (i in (4, 9))
        (tmp_path / f"n{i:02}.txt").write_text(" ".join(words) + f" entry {i}\n")
    Indexer(store.documents, tiny_embed).add("notes", [tmp_path])
    return store.documents.get("notes")


def ids(hits) -> list[int]:
    return [h.chunk_id for h in hits]


def test_rarest_terms_keep_rare_words_rarest_first():
    words = ["python", "aphids", "zzz", "roses"]
    assert rarest_terms(words, [500, 3, 0, 40], budget=100, most=6) == ["aphids", "roses"]
    assert rarest_terms(words, [500, 3, 0, 40], budget=100, most=1) == ["aphids"]
    assert rarest_terms(words, [500, 3, 0, 40], budget=42, most=6) == ["aphids"]
    assert rarest_terms(words, [50, 3, 0, 40], budget=93, most=6) == ["aphids", "roses",
                                                                      "python"]
    # Every found word over the budget: the rarest still matches; none found: nothing.
    assert rarest_terms(words, [500, 300, 0, 200], budget=100, most=6) == ["roses"]
    assert rarest_terms(words, [0, 0, 0, 0], budget=100, most=6) == []


def bm25_query(text: str) -> str | None:
    """The FTS5 query of every word of the question, as a small collection gets."""
    return bm25_match(query_words(text))


def test_match_counts_stop_at_the_cap(collection, store):
    counts = store.documents.match_counts(collection,
                                          ['"python"', '"roses"', '"aphids"', '"absent"'])
    assert counts == [N_FILES, 5, 2, 0]
    assert store.documents.match_counts(collection, ['"python"', '"roses"'], cap=4) == [4, 4]


def test_a_common_word_is_dropped_and_the_order_stays(collection, store, tiny_embed):
    pruning = Retriever(store.documents, tiny_embed, bm25_budget=10)
    question = "python roses aphids"
    assert pruning.bm25_words(collection, question) == ["aphids", "roses"]
    everything = store.documents.bm25(collection, bm25_query(question), 50)
    hits = pruning.search("notes", question, k=10, mode="bm25")
    # "python" is in every chunk: its IDF is ~0, so dropping it changes no rank,
    # only leaves out the chunks that had nothing but it.
    assert ids(hits) == [cid for cid, _ in everything][:6]
    assert len(everything) == N_FILES and len(hits) == 6  # files 0, 4, 8, 12, 16 and 9
    # A question of common words only still finds chunks, by the rarest
    # (13 chunks have "note": over the budget, as "python" is).
    assert pruning.bm25_words(collection, "python note") == ["note"]
    assert pruning.search("notes", "python note", k=3, mode="bm25")


def test_a_small_collection_keeps_every_word(collection, store, tiny_embed):
    retriever = Retriever(store.documents, tiny_embed)  # budget: 20,000 chunks
    question = "python roses aphids"
    assert retriever.bm25_words(collection, question) == ["python", "roses", "aphids"]
    everything = store.documents.bm25(collection, bm25_query(question), 50)
    assert ids(retriever.search("notes", question, k=N_FILES, mode="bm25")) == \
        [cid for cid, _ in everything]
    # Past max_terms even a small collection keeps only the rarest.
    few = Retriever(store.documents, tiny_embed, max_terms=2)
    assert few.bm25_words(collection, "python garden roses aphids absent") == ["aphids", "roses"]


def test_the_dense_matrix_scores_as_the_stored_vectors(collection, store, tiny_embed):
    retriever = Retriever(store.documents, tiny_embed)
    held = retriever.matrix(collection.id)
    _, chunk_ids, blob = store.documents.vectors(collection.id)
    stored = np.frombuffer(blob, "<f2").reshape(len(chunk_ids), tiny_embed.dims)
    assert held.columns.shape == (tiny_embed.dims, N_FILES)
    assert np.array_equal(np.array(held.columns.T), stored.astype(np.float32))
    query = tiny_embed.embed(["roses in the garden"])[0]
    want = stored.astype(np.float32) @ query
    got = retriever.dense(collection.id, "roses in the garden", 8)
    assert [cid for cid, _ in got] == [chunk_ids[i] for i in np.argsort(-want, kind="stable")[:8]]
    assert np.allclose([s for _, s in got], np.sort(want)[::-1][:8], atol=1e-5)


def test_bm25_in_rank_order_is_bm25_of_that_collection_only(collection, store, tiny_embed,
                                                            tmp_path):
    Indexer(store.documents, tiny_embed).add("copy", [tmp_path])  # the same chunks again
    match = bm25_query("garden roses note")
    # Beside as many chunks its match spans the index; beside more, it is
    # narrowed to the collection (a third one's chunk makes the others more).
    for extra in ("", "garden roses note"):
        if extra:
            (tmp_path / "third").mkdir()
            (tmp_path / "third" / "t.txt").write_text(extra)
            Indexer(store.documents, tiny_embed).add("third", [tmp_path / "third"])
        other = store.documents.get("copy")
        with store.documents._db.reading() as cur:  # the plain form: bm25() of every match
            want = cur.execute(
                "SELECT k.id, -bm25(doc_chunks_fts, 1.0, 2.0, 0.0) FROM doc_chunks_fts JOIN"
                " doc_chunks k ON k.id = doc_chunks_fts.rowid WHERE doc_chunks_fts MATCH ? AND"
                " k.collection_id = ? ORDER BY bm25(doc_chunks_fts, 1.0, 2.0, 0.0), k.id"
                " LIMIT 7", (match, other.id)).fetchall()
        got = store.documents.bm25(other, match, 7)
        assert [cid for cid, _ in got] == [cid for cid, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want])
        assert min(cid for cid, _ in got) > N_FILES  # none from the first collection


def test_a_small_collection_beside_a_larger_one_keeps_its_matches(collection, store,
                                                                  tiny_embed, tmp_path):
    """Which words are rare is counted in the searched collection: "python" is
    in all 20 chunks of "notes" but one chunk of "pets", where it must match."""
    pets = tmp_path / "pets"
    pets.mkdir()
    (pets / "a.txt").write_text("my python eats mice\n")
    (pets / "b.txt").write_text("the cat sleeps all day\n")
    Indexer(store.documents, tiny_embed).add("pets", [pets])
    small = store.documents.get("pets")
    # "pets" holds 2 chunks, within the budget: every word is matched.
    pruning = Retriever(store.documents, tiny_embed, bm25_budget=10)
    hits = pruning.search("pets", "python aphids", k=5, mode="bm25")
    assert [h.path for h in hits] == [str(pets / "a.txt")]
    # Past max_terms the words are pruned by their counts in "pets" alone:
    # "aphids" (2 chunks of "notes") is not there, "python" is.
    one = Retriever(store.documents, tiny_embed, bm25_budget=1, max_terms=1)
    assert [h.path for h in one.search("pets", "aphids python", k=5, mode="bm25")] == \
        [str(pets / "a.txt")]
    # The larger collection keeps pruning by its own counts, and finds only its own chunks.
    assert [h.chunk_id for h in pruning.search("notes", "python roses aphids", k=50,
                                               mode="bm25")] == \
        [cid for cid, _ in store.documents.bm25(collection, '"aphids" OR "roses"', 50)]
    assert small.chunks == 2


def test_words_are_recounted_only_when_all_found_are_over_the_budget(collection, store,
                                                                     tiny_embed, monkeypatch):
    calls = []
    counted = store.documents.match_counts
    monkeypatch.setattr(store.documents, "match_counts",
                        lambda *a, **kw: calls.append(kw.get("cap")) or counted(*a, **kw))
    pruning = Retriever(store.documents, tiny_embed, bm25_budget=10)
    assert pruning.bm25_words(collection, "zebra quokka") == []  # found nowhere: once
    assert calls == [11]
    # "note" (13 chunks) and "python" (20): both past the cap, so counted again in full.
    assert pruning.bm25_words(collection, "python note") == ["note"]
    assert calls == [11, 11, None]
