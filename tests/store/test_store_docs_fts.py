"""Schema 14: a database whose BM25 index over document chunks predates the
collection column migrates with every chunk searchable, per collection."""

from __future__ import annotations

from pathlib import Path

from mlxchat.store import open_store
from mlxchat.store.docs_fts import V14_DOC_CHUNKS_FTS_BY_COLLECTION
from mlxchat.store.schema import MIGRATIONS

from tests.store.old_versions import database_at

BEFORE = MIGRATIONS.index(V14_DOC_CHUNKS_FTS_BY_COLLECTION)


def _database_before(path: Path) -> None:
    conn = database_at(path, BEFORE)
    for cid, name in ((1, "big"), (2, "small")):
        conn.execute("INSERT INTO doc_collections (id, name, embedder, dims, created, updated)"
                     " VALUES (?, ?, 'e', 2, 1, 1)", (cid, name))
        conn.execute("INSERT INTO doc_files (id, collection_id, path, kind, size, mtime_ns,"
                     " sha256, indexed) VALUES (?, ?, ?, 'text', 1, 1, 'x', 1)",
                     (cid, cid, f"/{name}.txt"))
    texts = [(1, "python snakes"), (1, "python eggs"), (1, "aphids"), (2, "python pets")]
    for i, (cid, text) in enumerate(texts):
        conn.execute("INSERT INTO doc_chunks (file_id, collection_id, position, start_line,"
                     " end_line, heading, text, token_count, vector)"
                     " VALUES (?, ?, ?, 1, 1, '', ?, 2, x'')", (cid, cid, i, text))
    conn.close()


def test_old_chunks_are_counted_and_found_per_collection(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _database_before(path)
    store = open_store(path)
    docs = store.documents
    big, small = docs.get("big"), docs.get("small")
    # The small collection's counts and search leave the larger one's chunks out.
    assert docs.match_counts(small, ['"python"', '"aphids"', '"snakes"']) == [1, 0, 0]
    assert [cid for cid, _ in docs.bm25(small, '"python" OR "snakes"', 10)] == [4]
    assert [cid for cid, _ in docs.bm25(big, '"python" OR "pets"', 10)] == [1, 2]
    # Chunks dropped and added after go through the new index's triggers.
    docs.remove_files(big.id, ["/big.txt"])
    assert docs.match_counts(docs.get("small"), ['"python"']) == [1]
    with store.db.writing() as cur:
        cur.execute("INSERT INTO doc_chunks_fts(doc_chunks_fts, rank) VALUES ('integrity-check', 1)")
    store.close()
