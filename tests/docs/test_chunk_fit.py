"""Every chunk fits what the embedder reads: sizes are counted in its own word
pieces, the heading path it is embedded with and [CLS]/[SEP] included, so no
chunk's end is cut off before it is embedded (issue 34, defect 1)."""

from __future__ import annotations

from tokenizers import Tokenizer

from mlxchat.docs import Indexer
from mlxchat.docs.chunking import CHUNKER, ChunkSizes, chunk_text
from mlxchat.docs.embedder import MAX_TOKENS

# Ordinary prose, as notes are written: hard-wrapped paragraphs under headings,
# and (Markdown) paragraphs on one long line each.
SENTENCES = [
    "The grey heron stands motionless in the shallows, waiting for a fish to come within reach.",
    "Ornithologists have recorded colonies of several hundred nests in the tallest trees.",
    "Unquestionably the most striking feature is the long, dagger-like bill, yellow in spring.",
    "Young birds leave the nest after seven or eight weeks, though they return to be fed.",
    "In winter, herons gather near unfrozen water; a hard frost can be fatal to many of them.",
    "Their diet includes eels, frogs, voles, ducklings and, occasionally, small rabbits.",
]


def prose(paragraphs: int) -> str:
    parts = ["# Herons of the river valley", ""]
    for i in range(paragraphs):
        if i % 4 == 0:
            parts += [f"## Observations, part {i // 4 + 1}: behaviour and feeding habits", ""]
        sentences = [SENTENCES[(i + j) % len(SENTENCES)] for j in range(5 + i % 3)]
        if i % 2:
            parts.append(" ".join(sentences))  # one long line
        else:
            parts += sentences  # one sentence a line
        parts.append("")
    return "\n".join(parts)


def test_every_chunk_of_prose_is_read_whole_by_the_embedder(tmp_path, store, tiny_embed):
    text = prose(24)
    (tmp_path / "herons.md").write_text(text)
    report = Indexer(store.documents, tiny_embed).add("birds", [tmp_path])
    assert report.chunks_added > 5
    # What was embedded, counted by the embedder's tokenizer with [CLS] and
    # [SEP] but without its truncation: never more than it reads.
    counter = Tokenizer.from_str(tiny_embed.tokenizer.to_str())
    counter.no_truncation()
    embedded = [len(e.ids) for e in counter.encode_batch(tiny_embed.embedded)]
    assert max(embedded) <= MAX_TOKENS
    pieces = tiny_embed.word_pieces
    # Each chunk's recorded size is its text's word pieces, within the limit.
    sizes = ChunkSizes.reading(tiny_embed.reads)
    info = store.documents.get("birds")
    stored = store.documents.chunks(list(store.documents.vectors(info.id)[1]))
    assert [c.token_count for c in stored] == pieces.count([c.text for c in stored])
    assert all(c.token_count <= sizes.limit for c in stored)
    # And they are not cut needlessly small: most are near the target.
    assert sorted(c.token_count for c in stored)[len(stored) // 2] >= sizes.target * 2 // 3


def test_a_chunk_is_never_over_its_limit_even_with_the_overlap(tmp_path):
    sizes = ChunkSizes(target=60, limit=70, overlap=20, heading_break=10)
    chunks = chunk_text(prose(12), "markdown", sizes=sizes)
    assert len(chunks) > 10
    assert max(c.tokens for c in chunks) <= sizes.limit


def test_a_collection_chunked_the_old_way_is_searched_and_re_chunked_when_its_file_changes(
        tmp_path, store, tiny_embed):
    from mlxchat.docs import Retriever

    notes = tmp_path / "herons.md"
    notes.write_text(prose(12))
    old = ChunkSizes(target=280, limit=400, overlap=40, heading_break=60)  # as before issue 34
    Indexer(store.documents, tiny_embed, sizes=old).add("birds", [tmp_path])
    info = store.documents.get("birds")
    before = store.documents.chunks(list(store.documents.vectors(info.id)[1]))
    assert max(c.token_count for c in before) > tiny_embed.reads  # too big to be read whole
    hits = Retriever(store.documents, tiny_embed).search("birds", "heron bill", k=3)
    assert hits and {h.chunk_id for h in hits} <= {c.id for c in before}
    # An update re-chunks a file that changed, to the sizes the embedder reads.
    notes.write_text(prose(12) + "\nA last line.\n")
    report = Indexer(store.documents, tiny_embed).update("birds")
    assert report.files_indexed == 1
    after = store.documents.chunks(list(store.documents.vectors(info.id)[1]))
    assert max(c.token_count for c in after) <= ChunkSizes.reading(tiny_embed.reads).limit


def test_an_update_cuts_again_every_file_an_earlier_chunking_cut(tmp_path, store, tiny_embed):
    (tmp_path / "herons.md").write_text(prose(6))
    (tmp_path / "other.md").write_text(prose(2))
    indexer = Indexer(store.documents, tiny_embed)
    indexer.add("birds", [tmp_path])
    info = store.documents.get("birds")
    assert {r.chunker for r in store.documents.files(info.id).values()} == {CHUNKER}
    # Rows written before files recorded their chunking read 1 (schema 21's default).
    with store.documents._db.writing() as cur:
        cur.execute("UPDATE doc_files SET chunker = 1 WHERE path LIKE '%herons.md'")
    report = indexer.update("birds")
    assert (report.files_indexed, report.files_unchanged) == (1, 1)  # unchanged on disk
    assert {r.chunker for r in store.documents.files(info.id).values()} == {CHUNKER}
    assert indexer.update("birds").files_indexed == 0
