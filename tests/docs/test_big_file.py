"""One 30 MB text file: progress and cancel within it, its chunks written in
batches (marked incomplete until the last), nothing half-written after a
cancel, and memory bounded by a batch, not the file (measured in a
subprocess). The embedder is the tests' tiny one; the test cancels after
a few batches rather than embedding all 18,000 chunks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mlxchat.docs import Indexer
from mlxchat.docs.chunking import chunk_text, iter_chunks
from mlxchat.docs.indexer import BATCH_CHUNKS

ROOT = Path(__file__).resolve().parents[2]
PARA = "".join(f"## Part {i}\n\nParagraph {i} talks about topic {i} at some length, with "
               "several words in it, and then a few more.\n\n" for i in range(200))


def write_big(path: Path, size: int = 30 << 20) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    block = PARA.encode() * 64
    with path.open("wb") as fh:
        for _ in range(size // len(block) + 1):
            fh.write(block)
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    return write_big(tmp_path_factory.mktemp("big") / "docs" / "big.md")


def test_progress_and_cancel_within_a_30_mb_file(big, store, tiny_embed):
    cancel = threading.Event()
    within, in_db = [], []

    def progress(p):
        if p.part is None or cancel.is_set():
            return
        within.append(p)
        row = store.documents.files(store.documents.get("n").id)[str(big)]
        in_db.append((row.chunks, row.mtime_ns, row.sha256))
        if row.chunks == 3 * BATCH_CHUNKS:
            cancel.set()  # escape, once three batches were written

    report = Indexer(store.documents, tiny_embed).add("n", [big.parent], on_progress=progress,
                                                      cancel=cancel)
    # Progress within the file, after each slice embedded, before its end.
    parts = [p.part for p in within]
    assert len(parts) > 3 and parts == sorted(parts) and 0 < parts[0] and parts[-1] < 0.05
    assert within[0].files_done == 0 and "big.md" in within[0].words()
    # Written a batch at a time, the row incomplete (no hash: an update reads it again).
    assert sorted({c for c, _, _ in in_db}) == [0, BATCH_CHUNKS, 2 * BATCH_CHUNKS,
                                                3 * BATCH_CHUNKS]
    assert {(m, h) for _, m, h in in_db} == {(-1, "")}
    # The cancel stops it within a slice of embedding, and nothing of it stays.
    assert report.cancelled and report.files_indexed == 0 and report.chunks_added == 0
    assert len(tiny_embed.embedded) <= 4 * BATCH_CHUNKS
    info = store.documents.get("n")
    assert (info.files, info.chunks) == (0, 0)


def test_sections_chunk_as_the_whole_text_does(tmp_path):
    text = PARA * 50  # 620 KB: two sections
    whole, parts = chunk_text(text, "markdown"), list(iter_chunks(text, "markdown"))
    assert abs(len(parts) - len(whole)) <= 8  # only chunks at a seam differ
    lines = text.split("\n")
    for chunk in parts:  # every chunk's lines and heading are where they say
        assert "\n".join(lines[chunk.start_line - 1:chunk.end_line]) == chunk.text
        assert chunk.heading and chunk.heading[-1].startswith("Part ")
    assert parts[-1].end_line == whole[-1].end_line


CHILD = """
import json, resource, sys, threading
from pathlib import Path
from mlxchat.docs import Indexer
from mlxchat.store import open_store
from tests.docs.conftest import tiny_embedder

folder, batches = Path(sys.argv[1]), int(sys.argv[2])
store, embed = open_store(":memory:"), tiny_embedder()
embed.embed(["warm up"])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cancel, parts = threading.Event(), []
def progress(p):
    if p.part is not None and not cancel.is_set():
        parts.append(p.part)
        if len(parts) == batches:
            cancel.set()
report = Indexer(store.documents, embed).add("n", [folder], on_progress=progress, cancel=cancel)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kb": before, "after_kb": after, "parts": parts,
                  "cancelled": report.cancelled}))
"""


def test_memory_stays_bounded_by_a_batch_not_the_file(big):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "app"), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(big.parent), "40"], env=env,
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["cancelled"] and len(out["parts"]) == 40
    grown_mb = (out["after_kb"] - out["before_kb"]) / 1024
    # The file's bytes and text (30 MB each) and a section's rows; never its
    # 18,000 chunks at once (2.2 GB with the real embedder before).
    assert grown_mb < 300, f"peak memory grew {grown_mb:.0f} MB"
