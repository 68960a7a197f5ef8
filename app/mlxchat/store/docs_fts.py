"""The document tables' later migrations: the BM25 index over document chunks
by collection (schema version 14) and the chunking each file was cut by (20).

Version 10's index held the chunks' text and heading only, so a word's count
and a search's scoring spanned every collection: beside a 100,000-chunk
collection a 480-chunk one lost the words common in the large one (27% of
its BM25 hits over the bench's 50 questions) or, kept, scored the large one's
matches too (364 ms at p95). The chunk's
collection is now a column of the index, weighted 0 in BM25, and
``collection_id:"7"`` in a MATCH keeps both within collection 7.
"""

from __future__ import annotations

V14_DOC_CHUNKS_FTS_BY_COLLECTION = (
    "DROP TRIGGER doc_chunks_fts_insert",
    "DROP TRIGGER doc_chunks_fts_delete",
    "DROP TABLE doc_chunks_fts",
    """
    CREATE VIRTUAL TABLE doc_chunks_fts USING fts5(
        text, heading, collection_id, content='doc_chunks', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER doc_chunks_fts_insert AFTER INSERT ON doc_chunks BEGIN
        INSERT INTO doc_chunks_fts(rowid, text, heading, collection_id)
            VALUES (new.id, new.text, new.heading, new.collection_id);
    END
    """,
    """
    CREATE TRIGGER doc_chunks_fts_delete AFTER DELETE ON doc_chunks BEGIN
        INSERT INTO doc_chunks_fts(doc_chunks_fts, rowid, text, heading, collection_id)
            VALUES ('delete', old.id, old.text, old.heading, old.collection_id);
    END
    """,
    "INSERT INTO doc_chunks_fts(doc_chunks_fts) VALUES ('rebuild')",
)

V21_DOC_FILES_CHUNKER = (
    # Which chunking cut each file (``docs.chunking.CHUNKER``; rows before this
    # were cut by the first, which could leave a heading alone in a chunk): an
    # update re-chunks a file cut by another, however unchanged it is.
    "ALTER TABLE doc_files ADD COLUMN chunker INTEGER NOT NULL DEFAULT 1",
)

BM25_WEIGHTS = "bm25(1.0, 2.0, 0.0)"
"""Text, heading (twice the text) and the collection column (nothing)."""


def in_collection(match: str, collection_id: int) -> str:
    """An FTS5 MATCH expression narrowed to one collection's chunks."""
    return f'({match}) AND collection_id:"{int(collection_id)}"'
