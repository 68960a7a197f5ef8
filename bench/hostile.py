"""What the hostile inputs of issue 33 cost now, each beside its baseline
measured in the same run:

- a 15 MB message to a real `mlxchat serve` on the bundled model: the time to
  its 400 and the server's resident memory before and after, against the
  time the tokenizer alone takes for that text (what the old path spent at
  least, on the one lane, before refusing): ``huge_refusal_ratio``;
- a 30 MB text file indexed with the real embedder, cancelled 1.5 s after its
  first progress within the file (mid-embedding): seconds to that first
  progress and from the cancel to the end, against the seconds of one
  old-style batch of 64 chunks (what a cancel had to wait for at least):
  ``index_cancel_ratio``; and what the slices cost, 64 chunks paced against
  64 in one call, interleaved: ``paced_cost_ratio``.

Run: ``HF_HUB_OFFLINE=1 PYTHONPATH=app:. .venv/bin/python bench/hostile.py``
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "app"), str(ROOT)]

HUGE = "All work and no play makes a dull model.\n" * (15_000_000 // 41)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def huge_message() -> dict[str, float]:
    from mlxchat.models import load_model

    from tests.server.conftest import request
    from tests.server.served_process import ServeProcess

    served = ServeProcess(Path("smollm2-135m"))  # the alias: requests name it so
    try:
        port = served.wait_ready()
        before = _rss_mb(served.proc.pid)
        body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": HUGE}]}
        t0 = time.perf_counter()
        reply = request(f"http://127.0.0.1:{port}", "POST", "/v1/chat/completions", body)
        refused_s = time.perf_counter() - t0
        assert reply.status == 400, reply.body[:200]
        after = _rss_mb(served.proc.pid)
    finally:
        served.end()
    tokenizer = load_model("smollm2-135m").tokenizer
    t0 = time.perf_counter()
    tokenizer.encode(HUGE)
    tokenize_s = time.perf_counter() - t0
    return {"huge_refusal_s": refused_s, "huge_tokenize_s": tokenize_s,
            "server_rss_before_mb": before, "server_rss_after_mb": after,
            "huge_refusal_ratio": refused_s / tokenize_s}


def _write_prose(path: Path, size: int = 30 << 20) -> Path:
    """Markdown with chunks of the usual size (~280 tokens): paragraphs of 60
    words, a heading every 20 of them."""
    words = "the river runs past the old mill and turns its wheel all day long".split()
    para = " ".join(words[i % len(words)] for i in range(60)) + ".\n\n"
    block = "".join(f"## Part {i}\n\n" + para * 20 for i in range(50)).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for _ in range(size // len(block) + 1):
            fh.write(block)
    return path


def index_cancel() -> dict[str, float]:
    from mlxchat.docs import Indexer
    from mlxchat.docs.chunking import iter_chunks
    from mlxchat.docs.embedder import default_embedder
    from mlxchat.docs.indexer import BATCH_CHUNKS, _texts
    from mlxchat.docs.paced import PacedEmbedder
    from mlxchat.store import open_store
    folder = Path(tempfile.mkdtemp()) / "docs"
    big = _write_prose(folder / "big.md")
    embedder = default_embedder()
    embedder.embed(["warm up"])
    texts = _texts([c for _, c in zip(range(BATCH_CHUNKS),
                                       iter_chunks(big.read_text(), "markdown"))])
    whole, paced = [], []
    for _ in range(2):
        t0 = time.perf_counter()
        embedder.embed(texts)
        whole.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        PacedEmbedder(embedder).embed(texts)
        paced.append(time.perf_counter() - t0)
    store = open_store(":memory:")
    cancel, marks = threading.Event(), {}
    start = time.perf_counter()

    def cancel_later() -> None:
        marks["cancelled_at"] = time.perf_counter()
        cancel.set()

    def progress(p) -> None:
        if p.part is not None and "first_progress_s" not in marks:
            marks["first_progress_s"] = time.perf_counter() - start
            threading.Timer(1.5, cancel_later).start()
    report = Indexer(store.documents, embedder).add("big", [folder], on_progress=progress,
                                                    cancel=cancel)
    stopped_s = time.perf_counter() - marks["cancelled_at"]
    assert report.cancelled and store.documents.get("big").chunks == 0
    return {"index_first_progress_s": marks["first_progress_s"], "index_cancel_s": stopped_s,
            "old_batch_s": min(whole), "index_cancel_ratio": stopped_s / min(whole),
            "paced_batch_s": min(paced), "paced_cost_ratio": min(paced) / min(whole)}


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    figures = {**huge_message(), **index_cancel()}
    for name, value in figures.items():
        print(f"{name:>24}: {value:,.3f}")
    print("ratios: " + " ".join(f"{k}={figures[k]:.4f}" for k in
                                ("huge_refusal_ratio", "index_cancel_ratio",
                                 "paced_cost_ratio")))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
