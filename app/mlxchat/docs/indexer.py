"""Indexing files into a collection, incrementally and cancellably.

A file whose size and mtime match its row is not read; one whose content hash
matches is not re-chunked (its row takes the new mtime). Changed files are
chunked and embedded in batches, each batch written in one transaction, so a
crash between batches leaves whole files only; a cancel writes the files read
so far, whole, and the next update carries on from there. Files gone from disk are dropped.
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

from mlxchat.docs.chunking import ChunkSizes, chunk_text
from mlxchat.docs.embedder import Embedder
from mlxchat.docs.errors import DocsError
from mlxchat.docs.reading import NotText, read_document
from mlxchat.docs.walk import Skipped, check_roots, walk
from mlxchat.files import FileRefused, read_limited
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


@dataclass(frozen=True)
class IndexProgress:
    files_done: int
    files_total: int
    chunks: int
    chunks_per_s: float
    current: str


    def words(self) -> str:
        """'12/40 files · 230 chunks · 45 chunks/s', as every progress line says it."""
        return (f"{self.files_done:,}/{self.files_total:,} files · {self.chunks:,} chunks · "
                f"{self.chunks_per_s:.0f} chunks/s")


@dataclass
class IndexReport:
    collection: str
    files_indexed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    chunks_added: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    files_with_replacements: int = 0
    """Files that were not valid UTF-8 (bad bytes replaced)."""
    cancelled: bool = False
    seconds: float = 0.0

    @property
    def chunks_per_s(self) -> float:
        return self.chunks_added / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Pending:
    updates: list[tuple[FileUpdate, list]] = field(default_factory=list)
    chunks: int = 0


class Indexer:
    def __init__(self, documents: Documents, embedder: Embedder, *,
                 sizes: ChunkSizes = ChunkSizes(), max_file_bytes: int = MAX_FILE_BYTES) -> None:
        self.documents = documents
        self.embedder = embedder
        self.sizes = sizes
        self.max_file_bytes = max_file_bytes

    def add(self, name: str, paths: Sequence[str | Path], *,
            on_progress: Callable[[IndexProgress], None] | None = None,
            cancel: threading.Event | None = None) -> IndexReport:
        """Index ``paths`` into the collection, making it or adding to its roots."""
        roots = [str(p) for p in check_roots(paths)]
        check_name(name)
        try:
            info = self.documents.get(name)
        except CollectionNotFound:
            info = self.documents.create(name, roots, embedder=self.embedder.name,
                                         dims=self.embedder.dims)
        else:
            self._check_embedder(info)
            merged = info.roots + [r for r in roots if r not in info.roots]
            self.documents.set_roots(info.id, merged)
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
        found = walk(roots)
        report.skipped.extend(found.skipped)
        known = self.documents.files(info.id)
        pending = _Pending()
        total = len(found.files)
        for done, path in enumerate(found.files):
            if cancel is not None and cancel.is_set():
                report.cancelled = True
                break
            self._visit(info, path, known.get(str(path)), pending, report)
            if pending.chunks >= BATCH_CHUNKS or len(pending.updates) >= BATCH_CHUNKS:
                self._write(info, pending, report)
            if on_progress is not None:
                elapsed = time.perf_counter() - started
                on_progress(IndexProgress(done + 1, total, report.chunks_added + pending.chunks,
                                          report.chunks_added / elapsed if elapsed else 0.0,
                                          str(path)))
        # Files read before a cancel are whole: keep them (the next update skips them).
        self._write(info, pending, report)
        if not report.cancelled:
            if found.complete:
                gone = sorted(set(known) - {str(p) for p in found.files})
                self.documents.remove_files(info.id, gone)
                report.files_removed = len(gone)
        report.seconds = time.perf_counter() - started
        return report

    def _visit(self, info: CollectionInfo, path: Path, record, pending: _Pending,
               report: IndexReport) -> None:
        try:
            stat = path.stat()
            if record is not None and record.size == stat.st_size \
                    and record.mtime_ns == stat.st_mtime_ns:
                report.files_unchanged += 1
                return
            data = read_limited(path, self.max_file_bytes)
            digest = hashlib.sha256(data).hexdigest()
            if record is not None and record.sha256 == digest:
                self.documents.touch_file(record.id, size=stat.st_size,
                                          mtime_ns=stat.st_mtime_ns)
                report.files_unchanged += 1
                return
            doc = read_document(path, data, limit=self.max_file_bytes)
        except (NotText, FileRefused, DocsError) as exc:
            report.skipped.append(Skipped(str(path), exc.user_text()))
            return
        except OSError as exc:
            report.skipped.append(Skipped(str(path), exc.strerror or str(exc)))
            return
        if doc.replaced:
            report.files_with_replacements += 1
        chunks = chunk_text(doc.text, doc.kind, sizes=self.sizes)
        update = FileUpdate(path=str(path), kind=doc.kind, size=stat.st_size,
                            mtime_ns=stat.st_mtime_ns, sha256=digest, replaced_chars=doc.replaced)
        pending.updates.append((update, chunks))
        pending.chunks += len(chunks)

    def _write(self, info: CollectionInfo, pending: _Pending, report: IndexReport) -> None:
        """Embed the pending files' chunks and write them in one transaction."""
        if not pending.updates:
            return
        texts = [embedding_text(" > ".join(c.heading), c.text)
                 for _, chunks in pending.updates for c in chunks]
        vectors = self.embedder.embed(texts) if texts else np.zeros((0, self.embedder.dims))
        blobs = iter(vector_blobs(vectors))
        files = []
        for update, chunks in pending.updates:
            new = [NewChunk(c.start_line, c.end_line, " > ".join(c.heading), c.text, c.tokens,
                            next(blobs)) for c in chunks]
            files.append((update, new))
        self.documents.replace_files(info.id, files)
        report.files_indexed += len(files)
        report.chunks_added += len(texts)
        pending.updates.clear()
        pending.chunks = 0
