"""Document collections: their files, chunks (text, place, embedding bytes) and
the BM25 index over the chunks (FTS5).

Vectors are stored and returned as bytes; what they hold is the caller's
business (the store never imports numpy or mlx). A file is replaced in one
transaction, so an index interrupted between files has no half-written file;
one too large for that is written in batches, its row marked incomplete
until the last (an update reads it again).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Sequence

from mlxchat.store.database import Database
from mlxchat.store.docs_fts import BM25_WEIGHTS, in_collection
from mlxchat.store.errors import StoreError


RECALL_PREFIX = "~recall-"
"""Hidden collections: a session's own messages, for recall (``docs.recall_index``).
No collection the user makes can start so; ``list`` leaves them out."""


def recall_collection(session_id: int) -> str:
    """The hidden collection a session's messages are recalled from."""
    return f"{RECALL_PREFIX}{session_id}"


def drop_collection(cur, name: str) -> None:
    """Delete a collection, its files and chunks, if it exists (inside a write)."""
    row = cur.execute("SELECT id FROM doc_collections WHERE name = ?", (name,)).fetchone()
    if row is not None:
        cur.execute("DELETE FROM doc_chunks WHERE collection_id = ?", (row[0],))
        cur.execute("DELETE FROM doc_collections WHERE id = ?", (row[0],))


class CollectionNotFound(StoreError):
    """No collection has that name."""


class CollectionExists(StoreError):
    """A collection of that name is already there."""


@dataclass(frozen=True)
class CollectionInfo:
    id: int
    name: str
    roots: list[str]
    """The files and folders given when it was made, walked again by an update."""
    embedder: str
    dims: int
    generation: int
    """Changes with every write to its chunks."""
    files: int
    chunks: int
    bytes: int
    """The indexed files' sizes on disk, summed."""
    created: float
    updated: float
    follow_links: bool = False
    """Its walk follows symlinks out of its folders (the user said so)."""


@dataclass(frozen=True)
class FileRecord:
    id: int
    path: str
    kind: str
    size: int
    mtime_ns: int
    sha256: str
    chunks: int
    chunker: int = 1
    """The chunking that cut it (an update re-chunks a file cut by another)."""


@dataclass(frozen=True)
class FileUpdate:
    """A file's row as indexed now."""

    path: str
    kind: str
    size: int
    mtime_ns: int
    sha256: str
    replaced_chars: int
    chunker: int = 1


@dataclass(frozen=True)
class NewChunk:
    """A chunk to store: its place in the file, its text and its vector's bytes."""

    start_line: int
    end_line: int
    heading: str
    text: str
    token_count: int
    vector: bytes


@dataclass(frozen=True)
class StoredChunk:
    id: int
    path: str
    position: int
    start_line: int
    end_line: int
    heading: str
    text: str
    token_count: int
    file_size: int
    file_mtime_ns: int


_COLLECTION_SELECT = """
    SELECT c.*,
           (SELECT COUNT(*) FROM doc_files f WHERE f.collection_id = c.id) AS n_files,
           (SELECT COALESCE(SUM(size), 0) FROM doc_files f WHERE f.collection_id = c.id) AS n_bytes,
           (SELECT COUNT(*) FROM doc_chunks k WHERE k.collection_id = c.id) AS n_chunks
    FROM doc_collections c
"""


def _collection(row) -> CollectionInfo:
    return CollectionInfo(id=row["id"], name=row["name"], roots=json.loads(row["roots"]),
                          embedder=row["embedder"], dims=row["dims"],
                          generation=row["generation"], files=row["n_files"],
                          chunks=row["n_chunks"], bytes=row["n_bytes"],
                          created=row["created"], updated=row["updated"],
                          follow_links=bool(row["follow_links"]))


def _drop_file(cur, collection_id: int, path: str) -> None:
    cur.execute("DELETE FROM doc_chunks WHERE file_id IN (SELECT id FROM doc_files"
                " WHERE collection_id = ? AND path = ?)", (collection_id, path))
    cur.execute("DELETE FROM doc_files WHERE collection_id = ? AND path = ?",
                (collection_id, path))


def _narrows(cur, info: CollectionInfo) -> bool:
    """Whether a MATCH is narrowed to the collection's chunks: where other
    collections hold more chunks than it does. Narrowing merges the match with the
    collection's own list of chunks (a 100,000-chunk one's BM25 side took
    1.3-1.6x as long); left wide, a count or a search also spans the others'
    chunks, which costs less where they are fewer."""
    others = sum(cur.execute(f"SELECT COUNT(*) FROM (SELECT 1 FROM doc_chunks WHERE"
                             f" collection_id {op} ? LIMIT ?)",
                             (info.id, info.chunks + 1)).fetchone()[0] for op in ("<", ">"))
    return others > info.chunks


def _bump(cur, collection_id: int) -> None:
    cur.execute("UPDATE doc_collections SET generation = generation + 1, updated = ?"
                " WHERE id = ?", (time.time(), collection_id))


class Documents:
    """The document collections over one database."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- collections -----------------------------------------------------------

    def create(self, name: str, roots: Sequence[str], *, embedder: str,
               dims: int, follow_links: bool = False) -> CollectionInfo:
        with self._db.writing() as cur:
            if cur.execute("SELECT 1 FROM doc_collections WHERE name = ?", (name,)).fetchone():
                raise CollectionExists(f"A collection named {name!r} already exists; "
                                       "use `docs update` or another name.")
            now = time.time()
            cur.execute("INSERT INTO doc_collections (name, roots, embedder, dims, created,"
                        " updated, follow_links) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (name, json.dumps(list(roots)), embedder, dims, now, now,
                         int(follow_links)))
            return self._get(cur, name)

    def get(self, name: str) -> CollectionInfo:
        with self._db.reading() as cur:
            return self._get(cur, name)

    @staticmethod
    def _get(cur, name: str) -> CollectionInfo:
        row = cur.execute(_COLLECTION_SELECT + " WHERE c.name = ?", (name,)).fetchone()
        if row is None:
            raise CollectionNotFound(f"No document collection named {name!r} "
                                     "(`mlxchat docs list` shows them).")
        return _collection(row)

    def list(self) -> list[CollectionInfo]:
        """The user's collections (a session's hidden recall collection left out)."""
        with self._db.reading() as cur:
            return [_collection(r) for r in cur.execute(
                _COLLECTION_SELECT + " WHERE substr(c.name, 1, 1) <> '~' ORDER BY c.name")]

    def set_roots(self, collection_id: int, roots: Sequence[str]) -> None:
        with self._db.writing() as cur:
            cur.execute("UPDATE doc_collections SET roots = ? WHERE id = ?",
                        (json.dumps(list(roots)), collection_id))

    def set_follow_links(self, collection_id: int, follow: bool) -> None:
        with self._db.writing() as cur:
            cur.execute("UPDATE doc_collections SET follow_links = ? WHERE id = ?",
                        (int(follow), collection_id))

    def delete(self, name: str) -> CollectionInfo:
        """Drop the collection with its files and chunks."""
        with self._db.writing() as cur:
            info = self._get(cur, name)
            drop_collection(cur, name)
            return info

    # -- files -----------------------------------------------------------------

    def files(self, collection_id: int) -> dict[str, FileRecord]:
        with self._db.reading() as cur:
            rows = cur.execute(
                "SELECT f.*, (SELECT COUNT(*) FROM doc_chunks k WHERE k.file_id = f.id) AS n"
                " FROM doc_files f WHERE f.collection_id = ?", (collection_id,)).fetchall()
        return {r["path"]: FileRecord(id=r["id"], path=r["path"], kind=r["kind"], size=r["size"],
                                      mtime_ns=r["mtime_ns"], sha256=r["sha256"], chunks=r["n"],
                                      chunker=r["chunker"])
                for r in rows}

    def replace_files(self, collection_id: int,
                      files: Sequence[tuple[FileUpdate, Sequence[NewChunk]]]) -> None:
        """Put each file's chunks in place of what it had, all in one transaction."""
        with self._db.writing() as cur:
            for update, chunks in files:
                _drop_file(cur, collection_id, update.path)
                cur.execute("INSERT INTO doc_files (collection_id, path, kind, size, mtime_ns,"
                            " sha256, replaced_chars, indexed, chunker)"
                            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (collection_id, update.path, update.kind, update.size,
                             update.mtime_ns, update.sha256, update.replaced_chars, time.time(),
                             update.chunker))
                file_id = int(cur.lastrowid)
                cur.executemany(
                    "INSERT INTO doc_chunks (file_id, collection_id, position, start_line,"
                    " end_line, heading, text, token_count, vector)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(file_id, collection_id, i, c.start_line, c.end_line, c.heading, c.text,
                      c.token_count, c.vector) for i, c in enumerate(chunks)])
            _bump(cur, collection_id)

    # A file too large for one transaction is written a batch at a time: its row
    # is marked incomplete (mtime -1, no hash: an update reads it again) until
    # its last batch; a cancel removes it.
    def begin_file(self, collection_id: int, update: FileUpdate) -> int:
        """Drop what the file had and start its row, incomplete; its id."""
        with self._db.writing() as cur:
            _drop_file(cur, collection_id, update.path)
            cur.execute("INSERT INTO doc_files (collection_id, path, kind, size, mtime_ns,"
                        " sha256, replaced_chars, indexed, chunker)"
                        " VALUES (?, ?, ?, ?, -1, '', ?, ?, ?)",
                        (collection_id, update.path, update.kind, update.size,
                         update.replaced_chars, time.time(), update.chunker))
            _bump(cur, collection_id)
            return int(cur.lastrowid)

    def add_chunks(self, collection_id: int, file_id: int, first: int,
                   chunks: Sequence[NewChunk]) -> None:
        """One batch of a file's chunks, at positions from ``first`` on."""
        with self._db.writing() as cur:
            cur.executemany(
                "INSERT INTO doc_chunks (file_id, collection_id, position, start_line,"
                " end_line, heading, text, token_count, vector)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(file_id, collection_id, first + i, c.start_line, c.end_line, c.heading,
                  c.text, c.token_count, c.vector) for i, c in enumerate(chunks)])
            _bump(cur, collection_id)

    def finish_file(self, file_id: int, update: FileUpdate) -> None:
        """The file's last batch is in: its row is complete."""
        with self._db.writing() as cur:
            cur.execute("UPDATE doc_files SET mtime_ns = ?, sha256 = ?, indexed = ? WHERE id = ?",
                        (update.mtime_ns, update.sha256, time.time(), file_id))

    def touch_file(self, file_id: int, *, size: int, mtime_ns: int) -> None:
        """The file changed on disk but not in content: keep its chunks."""
        with self._db.writing() as cur:
            cur.execute("UPDATE doc_files SET size = ?, mtime_ns = ? WHERE id = ?",
                        (size, mtime_ns, file_id))

    def remove_files(self, collection_id: int, paths: Sequence[str]) -> None:
        if not paths:
            return
        with self._db.writing() as cur:
            for path in paths:
                _drop_file(cur, collection_id, path)
            _bump(cur, collection_id)

    # -- search ----------------------------------------------------------------

    def vectors(self, collection_id: int) -> tuple[int, list[int], bytes]:
        """(generation, chunk ids, their vectors' bytes concatenated in that order)."""
        with self._db.reading() as cur:
            generation = cur.execute("SELECT generation FROM doc_collections WHERE id = ?",
                                     (collection_id,)).fetchone()
            rows = cur.execute("SELECT id, vector FROM doc_chunks WHERE collection_id = ?"
                               " ORDER BY id", (collection_id,)).fetchall()
        return (generation[0] if generation else -1, [r[0] for r in rows],
                b"".join(r[1] for r in rows))

    def generation(self, collection_id: int) -> int:
        with self._db.reading() as cur:
            row = cur.execute("SELECT generation FROM doc_collections WHERE id = ?",
                              (collection_id,)).fetchone()
        return row[0] if row else -1

    def bm25(self, info: CollectionInfo, match: str, limit: int) -> list[tuple[int, float]]:
        """(chunk id, BM25 score, higher is better) for an FTS5 MATCH expression;
        a heading match weighs twice a text match. Ordered by FTS5's own rank, so
        the chunks come sorted and only the best are looked up for their
        collection (ordering by bm25() looked up every match: 2x slower). Beside
        larger collections the MATCH is narrowed to this one (see ``_narrows``)."""
        with self._db.reading() as cur:
            if _narrows(cur, info):
                match = in_collection(match, info.id)
            rows = cur.execute(
                "SELECT k.id, -rank AS score"
                " FROM doc_chunks_fts JOIN doc_chunks k ON k.id = doc_chunks_fts.rowid"
                f" WHERE doc_chunks_fts MATCH ? AND rank MATCH '{BM25_WEIGHTS}'"
                " AND k.collection_id = ? ORDER BY rank LIMIT ?",
                (match, info.id, limit)).fetchall()
        return [(r[0], r[1]) for r in rows]

    def match_counts(self, info: CollectionInfo, matches: Sequence[str], *,
                     cap: int | None = None) -> list[int]:
        """How many of the collection's chunks each FTS5 MATCH expression finds,
        counted no further than ``cap`` (if given) to bound the work for a
        common word; beside smaller collections, with their chunks (see ``_narrows``)."""
        with self._db.reading() as cur:
            if _narrows(cur, info):
                matches = [in_collection(match, info.id) for match in matches]
            return [cur.execute("SELECT COUNT(*) FROM (SELECT 1 FROM doc_chunks_fts"
                                " WHERE doc_chunks_fts MATCH ? LIMIT ?)",
                                (match, -1 if cap is None else cap)).fetchone()[0]
                    for match in matches]

    def chunks(self, ids: Sequence[int]) -> list[StoredChunk]:
        """The chunks with these ids, in that order (missing ones left out)."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        with self._db.reading() as cur:
            rows = cur.execute(
                "SELECT k.id, f.path, k.position, k.start_line, k.end_line, k.heading, k.text,"
                f" k.token_count, f.size, f.mtime_ns FROM doc_chunks k JOIN doc_files f ON f.id = k.file_id"
                f" WHERE k.id IN ({marks})", list(ids)).fetchall()
        found = {r[0]: StoredChunk(*r) for r in rows}
        return [found[i] for i in ids if i in found]
