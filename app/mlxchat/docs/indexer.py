"""Indexing files into a collection, incrementally and cancellably.

A file cut by this chunking (``CHUNKER``) whose size and mtime match its row is
not read; one whose content hash matches is not re-chunked (its row takes the
new mtime); one cut by another chunking is cut again. Changed files are
chunked and embedded in batches, each batch written in one transaction, so a
crash between batches leaves whole files only; a cancel writes the files read
so far, whole, as far as that takes no more than a moment, and the next update
carries on from there. Files gone from disk are dropped.

A file with more text than ``STREAMED_CHARS`` (up to the 32 MB limit) is
chunked a section at a time and its chunks embedded and written a batch at a
time, with progress within it: memory stays bounded by a batch, not the
file. Its row is marked incomplete until its last batch (a crash leaves it
to be read again by the next update; a cancel removes it). Embedding runs in
slices of a fraction of a second (``PacedEmbedder``), so a cancel stops it
within one.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from mlxchat.docs.chunking import (
    CHUNKER,
    HEADING_PIECES,
    Chunk,
    ChunkSizes,
    chunk_text,
    iter_chunks,
)
from mlxchat.docs.embedder import Embedder
from mlxchat.docs.errors import DocsError
from mlxchat.docs.index_progress import IndexProgress, IndexReport, measured_rate
from mlxchat.docs.paced import PacedEmbedder
from mlxchat.docs.reading import Document, NotText, read_document, refuse_binary
from mlxchat.docs.walk import Skipped, check_roots, walk
from mlxchat.docs.word_pieces import WordPieces
from mlxchat.files import FileRefused, FileTooLarge, read_limited
from mlxchat.generation import DOCS_NAME
from mlxchat.store.documents import (
    CollectionInfo,
    CollectionNotFound,
    Documents,
    FileUpdate,
    NewChunk,
)

MAX_FILE_BYTES = 32 << 20
BATCH_CHUNKS = 64
STREAMED_CHARS = 512 * 1024
CANCEL_GRACE_S = 0.5
"""After a cancel, files already read are still written whole if their
chunks embed within this long; the rest are left to the next update."""


def check_name(name: str) -> str:
    if not DOCS_NAME.match(name or ""):
        raise DocsError(f"Bad collection name {name!r}: use 1-64 letters, digits, '.', '_' "
                        "or '-', starting with a letter or digit.")
    return name


def embedding_text(heading: str, text: str) -> str:
    """What is embedded for a chunk: its heading path, then its text."""
    return f"{heading}\n{text}" if heading else text


def vector_blobs(vectors: np.ndarray) -> list[bytes]:
    """Each row as the stored blob: little-endian float16."""
    return [row.tobytes() for row in vectors.astype("<f2")]


@dataclass
class _Pending:
    updates: list[tuple[FileUpdate, list]] = field(default_factory=list)
    chunks: int = 0


class _Stop:
    """Whether to stop embedding: at once while indexing goes on (never), and
    ``CANCEL_GRACE_S`` after a cancel for what was read before it."""

    def __init__(self, cancel: threading.Event | None):
        self.cancel = cancel
        self._seen: float | None = None

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def __call__(self) -> bool:
        if not self.cancelled:
            return False
        if self._seen is None:
            self._seen = time.monotonic()
        return time.monotonic() - self._seen > CANCEL_GRACE_S


def _new_chunks(chunks: Sequence[Chunk], vectors: np.ndarray) -> list[NewChunk]:
    return [NewChunk(c.start_line, c.end_line, " > ".join(c.heading), c.text, c.tokens, blob)
            for c, blob in zip(chunks, vector_blobs(vectors))]


def _texts(chunks: Sequence[Chunk], pieces: WordPieces) -> list[str]:
    """What is embedded: each chunk's text after (the end of) its heading path,
    which ``ChunkSizes.reading`` leaves room for."""
    return [embedding_text(pieces.tail(" > ".join(c.heading), HEADING_PIECES), c.text)
            for c in chunks]


class Indexer:
    def __init__(self, documents: Documents, embedder: Embedder, *,
                 sizes: ChunkSizes | None = None, max_file_bytes: int = MAX_FILE_BYTES) -> None:
        """``sizes`` default to what the embedder reads whole."""
        self.documents = documents
        self.embedder = embedder
        self.sizes = sizes or ChunkSizes.reading(embedder.reads)
        self.pieces = embedder.word_pieces
        self.max_file_bytes = max_file_bytes

    def add(self, name: str, paths: Sequence[str | Path], *,
            on_progress: Callable[[IndexProgress], None] | None = None,
            cancel: threading.Event | None = None, follow_links: bool = False) -> IndexReport:
        """Index ``paths`` into the collection, making it or adding to its roots.
        ``follow_links``: its walks follow symlinks out of its folders from now on."""
        roots = [str(p) for p in check_roots(paths)]
        check_name(name)
        try:
            info = self.documents.get(name)
        except CollectionNotFound:
            info = self.documents.create(name, roots, embedder=self.embedder.name,
                                         dims=self.embedder.dims, follow_links=follow_links)
        else:
            self._check_embedder(info)
            merged = info.roots + [r for r in roots if r not in info.roots]
            self.documents.set_roots(info.id, merged)
            if follow_links:
                self.documents.set_follow_links(info.id, True)
            info = self.documents.get(name)
        return self._sync(info, on_progress, cancel)

    def update(self, name: str, *, on_progress: Callable[[IndexProgress], None] | None = None,
               cancel: threading.Event | None = None) -> IndexReport:
        info = self.documents.get(check_name(name))
        self._check_embedder(info)
        return self._sync(info, on_progress, cancel)

    def _check_embedder(self, info: CollectionInfo) -> None:
        if info.embedder != self.embedder.name or info.dims != self.embedder.dims:
            raise DocsError(f"Collection {info.name!r} was embedded with {info.embedder} "
                            f"({info.dims} dims), not {self.embedder.name}; remove and add it.")

    def _sync(self, info: CollectionInfo, on_progress, cancel) -> IndexReport:
        started = time.perf_counter()
        report = IndexReport(info.name)
        roots = [Path(r) for r in info.roots if os.path.exists(r)]
        found = walk(roots, follow_links=info.follow_links)
        report.skipped.extend(found.skipped)
        known = self.documents.files(info.id)
        pending, stop = _Pending(), _Stop(cancel)
        paced = PacedEmbedder(self.embedder)
        total = len(found.files)

        read, path = 0, Path()

        def progress(part: float | None = None, embedding: int = 0) -> None:
            """``embedding``: chunks of the batch being written embedded so far."""
            if on_progress is not None:
                embedded = report.chunks_added + embedding
                rate = measured_rate(embedded, time.perf_counter() - started)
                on_progress(IndexProgress(read, total, report.chunks_added + pending.chunks,
                                          rate, str(path), part, embedded))

        def write() -> None:
            self._write(info, pending, report, paced, stop,
                        lambda n: progress(embedding=n))
        for path in found.files:
            if stop.cancelled:
                report.cancelled = True
                break
            doc = self._visit(info, path, known.get(str(path)), report)
            if doc is not None and len(doc[1].text) > STREAMED_CHARS:
                write()  # the smaller ones first
                self._stream(info, *doc, report, paced, stop, progress)
            elif doc is not None:
                chunks = chunk_text(doc[1].text, doc[1].kind, sizes=self.sizes,
                                    pieces=self.pieces)
                pending.updates.append((doc[0], chunks))
                pending.chunks += len(chunks)
            read += 1
            if pending.chunks >= BATCH_CHUNKS or len(pending.updates) >= BATCH_CHUNKS:
                write()
            progress()
        # Files read before a cancel are whole: kept, if they embed in a moment.
        write()
        report.cancelled = report.cancelled or stop.cancelled
        if not report.cancelled and found.complete:
            gone = sorted(set(known) - {str(p) for p in found.files})
            self.documents.remove_files(info.id, gone)
            report.files_removed = len(gone)
        report.seconds = time.perf_counter() - started
        return report

    def _visit(self, info: CollectionInfo, path: Path, record,
               report: IndexReport) -> tuple[FileUpdate, Document] | None:
        """The file's new row and text, or None when it is unchanged or skipped."""
        try:
            stat = path.stat()
            if record is not None and record.chunker != CHUNKER:
                record = None  # cut by another chunking: cut again
            if record is not None and record.size == stat.st_size \
                    and record.mtime_ns == stat.st_mtime_ns:
                report.files_unchanged += 1
                return None
            try:
                data = read_limited(path, self.max_file_bytes)
            except FileTooLarge:
                refuse_binary(path)  # a binary file is named so at any size
                raise
            digest = hashlib.sha256(data).hexdigest()
            if record is not None and record.sha256 == digest:
                self.documents.touch_file(record.id, size=stat.st_size,
                                          mtime_ns=stat.st_mtime_ns)
                report.files_unchanged += 1
                return None
            doc = read_document(path, data, limit=self.max_file_bytes)
        except (NotText, FileRefused, DocsError) as exc:
            report.skipped.append(Skipped.because(str(path), exc.user_text()))
            return None
        except OSError as exc:
            report.skipped.append(Skipped(str(path), exc.strerror or str(exc)))
            return None
        if doc.replaced:
            report.files_with_replacements += 1
        return FileUpdate(path=str(path), kind=doc.kind, size=stat.st_size,
                          mtime_ns=stat.st_mtime_ns, sha256=digest,
                          replaced_chars=doc.replaced, chunker=CHUNKER), doc

    def _write(self, info: CollectionInfo, pending: _Pending, report: IndexReport,
               paced: PacedEmbedder, stop: _Stop,
               embedded: Callable[[int], None] = lambda n: None) -> None:
        """Embed the pending files' chunks (``embedded(n)`` after each slice) and
        write them in one transaction; those a stop left unembedded are dropped
        (the next update reads them)."""
        if not pending.updates:
            return
        texts = [t for _, chunks in pending.updates for t in _texts(chunks, self.pieces)]
        vectors = paced.embed(texts, stop, embedded)
        files, used = [], 0
        for update, chunks in pending.updates:
            if used + len(chunks) > len(vectors):
                break  # not embedded whole: left out
            files.append((update, _new_chunks(chunks, vectors[used:used + len(chunks)])))
            used += len(chunks)
        if files:
            self.documents.replace_files(info.id, files)
        report.files_indexed += len(files)
        report.chunks_added += used
        pending.updates.clear()
        pending.chunks = 0

    def _stream(self, info: CollectionInfo, update: FileUpdate, doc: Document,
                report: IndexReport, paced: PacedEmbedder, stop: _Stop,
                progress: Callable[[float], None]) -> None:
        """A large file chunked, embedded and written a batch at a time; a
        cancel removes what was written of it."""
        file_id = self.documents.begin_file(info.id, update)
        lines, written, batch = doc.text.count("\n") + 1, 0, []

        def flush() -> bool:
            nonlocal written
            vectors = paced.embed(_texts(batch, self.pieces), lambda: stop.cancelled,
                                  lambda n: progress(batch[n - 1].end_line / lines))
            if len(vectors) < len(batch):
                return False
            self.documents.add_chunks(info.id, file_id, written, _new_chunks(batch, vectors))
            written += len(batch)
            report.chunks_added += len(batch)
            batch.clear()
            return True
        for chunk in iter_chunks(doc.text, doc.kind, sizes=self.sizes, pieces=self.pieces):
            batch.append(chunk)
            if stop.cancelled or (len(batch) >= BATCH_CHUNKS and not flush()):
                break
        if not stop.cancelled and (not batch or flush()):
            self.documents.finish_file(file_id, update)
            report.files_indexed += 1
            return
        self.documents.remove_files(info.id, [update.path])  # nothing half-written stays
        report.chunks_added -= written
