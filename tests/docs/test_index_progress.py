"""What an index run says while it runs and when it ends: files read, chunks
embedded, and a rate only once it rests on enough work."""

from __future__ import annotations

import re

from mlxchat.docs import Indexer, IndexProgress, IndexReport
from mlxchat.docs.blas_threads import _numpy_openblas, blas_threads
from mlxchat.docs.index_progress import RATE_MIN_CHUNKS, RATE_MIN_S, measured_rate, rate_words

NOTE = "# Note {i}\n\n" + "Herons wade in the river {i} and watch the reeds for fish. " * 30


def test_a_few_small_files_report_what_is_read_and_embedded(tmp_path, store, tiny_embed):
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(5):
        (root / f"n{i}.md").write_text(NOTE.format(i=i))
    seen: list[IndexProgress] = []
    report = Indexer(store.documents, tiny_embed).add("n", [root], on_progress=seen.append)
    for p in seen:
        line = p.words()
        assert re.match(r"\d/5 files · \d+/\d+ chunks", line), line
        assert line.split(" · ")[1] == f"{p.chunks_embedded}/{p.chunks} chunks"
        rate = re.search(r"([\d.,]+) chunks/s", line)
        if rate is None:
            assert p.chunks_per_s is None
        else:  # shown with a decimal, once enough was embedded to mean something
            assert p.chunks_embedded >= RATE_MIN_CHUNKS and "." in rate.group(1)
    # Embedding reports as it goes: the last line has every chunk embedded.
    assert seen[-1].chunks_embedded == seen[-1].chunks == report.chunks_added > 5
    assert [p.work()[0] for p in seen] == sorted(p.work()[0] for p in seen)
    assert seen[-1].work() == (report.chunks_added, report.chunks_added)


def test_a_rate_needs_enough_chunks_and_time():
    assert measured_rate(RATE_MIN_CHUNKS - 1, 10 * RATE_MIN_S) is None
    assert measured_rate(100, RATE_MIN_S / 2) is None
    assert measured_rate(10, 4.0) == 2.5
    assert rate_words(0.4) == "0.4 chunks/s" and rate_words(2500) == "2,500 chunks/s"
    quick = IndexReport("n", chunks_added=10, seconds=0.8)
    assert quick.speed_words() == "10 chunks in 800 ms"
    slow = IndexReport("n", chunks_added=10, seconds=4.0)
    assert slow.speed_words() == "10 chunks in 4.00 s, 2.5 chunks/s"


def test_work_counts_unread_files_at_the_chunks_a_file_had():
    one_read = IndexProgress(1, 5, 2, None, "n0.md")
    assert one_read.work() == (0, 10)
    all_read = IndexProgress(5, 5, 12, None, "n4.md", chunks_embedded=6)
    assert all_read.work() == (6, 12)
    unchanged = IndexProgress(3, 5, 0, None, "n2.md")  # nothing to embed: files
    assert unchanged.work() == (3, 5)


def test_the_embedder_runs_numpy_blas_on_one_thread_and_gives_it_back():
    found = _numpy_openblas()
    with blas_threads():
        inside = found[1]() if found else None
    if found is None:  # numpy without its own OpenBLAS: nothing is changed
        assert inside is None
        return
    before = found[1]()
    assert inside == 1
    with blas_threads(2):
        assert found[1]() == 2
    assert found[1]() == before
