"""Incremental indexing: only changed files are read, chunked and embedded;
bad files are skipped and counted; a cancel leaves whole files only."""

from __future__ import annotations

import os
import threading

import pytest

from mlxchat.docs import DocsError, Indexer
from mlxchat.docs.reading import read_document
from mlxchat.docs.walk import walk
from mlxchat.files import FileRefused
from mlxchat.store.documents import CollectionNotFound

PARA = "Paragraph {i} talks about topic {i} at some length, with several words in it.\n\n"


def _corpus(root):
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# A\n\n" + "".join(PARA.format(i=i) for i in range(3)))
    (root / "b.txt").write_text("".join(PARA.format(i=i) for i in range(40)))
    (root / "sub" / "c.py").write_text("def c():\n    return 3\n")
    return root


def _chunks_by_file(store, name):
    info = store.documents.get(name)
    return {path: rec.chunks for path, rec in store.documents.files(info.id).items()}


def test_update_re_embeds_only_the_changed_file(tmp_path, store, tiny_embed):
    root = _corpus(tmp_path / "docs")
    indexer = Indexer(store.documents, tiny_embed)
    first = indexer.add("notes", [root])
    assert (first.files_indexed, first.skipped) == (3, [])
    assert len(tiny_embed.embedded) == first.chunks_added == store.documents.get("notes").chunks
    assert _chunks_by_file(store, "notes")[str(root / "b.txt")] > 1

    tiny_embed.embedded.clear()
    again = indexer.update("notes")
    assert (again.files_indexed, again.files_unchanged, tiny_embed.embedded) == (0, 3, [])

    os.utime(root / "a.md", ns=(1, 1))  # mtime changed, content not: no re-embedding
    assert indexer.update("notes").files_unchanged == 3 and tiny_embed.embedded == []
    assert indexer.update("notes").files_unchanged == 3  # the new mtime was recorded

    (root / "sub" / "c.py").write_text("def c():\n    return 4  # changed\n")
    (root / "b.txt").unlink()
    changed = indexer.update("notes")
    assert (changed.files_indexed, changed.files_removed, changed.files_unchanged) == (1, 1, 1)
    assert tiny_embed.embedded == ["c\ndef c():\n    return 4  # changed"]
    assert sorted(_chunks_by_file(store, "notes")) == [str(root / "a.md"), str(root / "sub/c.py")]
    _fts_matches_chunks(store)
    store.documents.delete("notes")
    _fts_matches_chunks(store)
    with store.db.reading() as cur:
        assert [cur.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("doc_collections", "doc_files", "doc_chunks")] == [0, 0, 0]


def _fts_matches_chunks(store):
    """FTS5 checks its index against the chunks table (raises when they differ)."""
    with store.db.writing() as cur:
        cur.execute("INSERT INTO doc_chunks_fts(doc_chunks_fts, rank) VALUES ('integrity-check', 1)")


def test_bad_files_are_skipped_and_counted(tmp_path, store, tiny_embed):
    root = tmp_path / "docs"
    (root / "deep").mkdir(parents=True)
    (root / "ok.md").write_text("# fine\n\ntext\n")
    (root / "image.png").write_bytes(b"\x89PNG\r\n")
    (root / "data.bin2").write_bytes(b"\x00\x01\x02 binary")
    (root / "latin.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (root / "big.txt").write_text("x" * 5000)
    (root / "big.bin2").write_bytes(b"\x00\x01\x02 binary" * 500)  # binary at any size
    (root / "deep" / "loop").symlink_to(root)
    report = Indexer(store.documents, tiny_embed, max_file_bytes=4000).add("n", [root])
    reasons = {os.path.basename(s.path): s.reason for s in report.skipped}
    assert set(reasons) == {"image.png", "data.bin2", "big.bin2", "big.txt", "loop"}
    assert all("binary" in reasons[name] for name in ("image.png", "data.bin2", "big.bin2"))
    assert "over the 4.0 KB limit" in reasons["big.txt"]
    assert "symlink loop" in reasons["loop"]
    assert report.files_indexed == 2 and report.files_with_replacements == 1
    rows = store.documents.files(store.documents.get("n").id)
    assert sorted(os.path.basename(p) for p in rows) == ["latin.txt", "ok.md"]


def test_a_folder_that_cannot_be_listed_is_reported_and_its_files_kept(
        tmp_path, store, tiny_embed, monkeypatch):
    root = _corpus(tmp_path / "docs")
    indexer = Indexer(store.documents, tiny_embed)
    indexer.add("n", [root])
    real = os.scandir

    def denied(path):
        if str(path).endswith("sub"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr("mlxchat.docs.walk.os.scandir", denied)
    found = walk([root])
    assert not found.complete and [s.reason for s in found.skipped] == ["Permission denied"]
    report = indexer.update("n")
    assert report.files_removed == 0  # not known gone: the folder was not listed
    assert str(root / "sub/c.py") in store.documents.files(store.documents.get("n").id)


def test_cancel_leaves_whole_files_and_update_carries_on(tmp_path, store, tiny_embed,
                                                          monkeypatch):
    root = tmp_path / "many"
    root.mkdir()
    for i in range(6):
        (root / f"f{i}.txt").write_text("".join(PARA.format(i=j) for j in range(30)))
    cancel = threading.Event()

    def progress(p):
        if p.files_done == 4:
            cancel.set()

    indexer = Indexer(store.documents, tiny_embed)
    # Batches of one file each, so the cancel falls between written batches.
    monkeypatch.setattr("mlxchat.docs.indexer.BATCH_CHUNKS", 1)
    report = indexer.add("n", [root], on_progress=progress, cancel=cancel)
    assert report.cancelled and report.files_indexed == 4
    full = {p: r.chunks for p, r in store.documents.files(store.documents.get("n").id).items()}
    assert len(full) == 4 and len(set(full.values())) == 1  # each file whole
    rest = indexer.update("n")
    assert (rest.files_indexed, rest.files_unchanged) == (2, 4)


def test_bad_input_is_one_line_and_changes_nothing(tmp_path, store, tiny_embed):
    indexer = Indexer(store.documents, tiny_embed)
    with pytest.raises(DocsError, match="No such file or folder"):
        indexer.add("n", [tmp_path / "missing"])
    with pytest.raises(DocsError, match="Bad collection name"):
        indexer.add("no spaces", [tmp_path])
    with pytest.raises(DocsError, match="at least one"):
        indexer.add("n", [])
    with pytest.raises(CollectionNotFound, match="No document collection named 'n'"):
        indexer.update("n")
    assert store.documents.list() == []
    with pytest.raises(FileRefused):
        read_document(tmp_path, limit=10)


def test_a_folder_of_many_small_files_shows_progress_cancels_and_resumes(tmp_path, store,
                                                                        tiny_embed):
    """3,000 small files in 30 folders (the 100,000-file case at a size a test
    can afford): progress for every file, a cancel midway keeps whole files,
    and the update carries on without embedding any of them again."""
    root = tmp_path / "notes"
    for d in range(30):
        folder = root / f"d{d:02}"
        folder.mkdir(parents=True)
        for f in range(100):
            (folder / f"n{f:03}.md").write_text(f"# Note {d}-{f}\n\nHerons {d} wade {f}.\n")
    cancel = threading.Event()
    seen: list[int] = []

    def progress(p):
        seen.append(p.files_done)
        assert p.files_total == 3000
        if p.files_done == 1200:
            cancel.set()

    indexer = Indexer(store.documents, tiny_embed)
    first = indexer.add("n", [root], on_progress=progress, cancel=cancel)
    assert first.cancelled and list(dict.fromkeys(seen)) == list(range(1, 1201))
    assert first.files_indexed == 1200 == len(tiny_embed.embedded)
    info = store.documents.get("n")
    assert (info.files, info.chunks) == (1200, 1200)
    tiny_embed.embedded.clear()
    rest = indexer.update("n")
    assert (rest.files_indexed, rest.files_unchanged, rest.cancelled) == (1800, 1200, False)
    assert len(tiny_embed.embedded) == 1800  # the 1,200 already indexed are not embedded again
    assert store.documents.get("n").chunks == 3000
