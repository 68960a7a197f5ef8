"""Indexing small inputs with the bundled embedder: numpy's BLAS on one thread
(what ``mlxchat.docs.blas_threads`` holds it to) against one a core (what it
starts by itself), alternating, so both meet the same load.

Two folders: 5 notes of ~1.5 kB (the '/docs add took 25 s' case) and 16 of
~3 kB. The last line is:
ratios: small_s_1=X small_s_default=X small_speedup=X big_s_1=X big_s_default=X big_speedup=X
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from mlxchat import blas  # noqa: E402,F401  (loads MLX's BLAS first, as the app does)
from mlxchat.docs import Indexer  # noqa: E402
from mlxchat.docs.blas_threads import THREADS  # noqa: E402
from mlxchat.docs.embedder import load_embedder  # noqa: E402
from mlxchat.store import open_store  # noqa: E402

WORDS = ("the cache window token model session reply prefill memory batch chunk file "
         "index search query heron river boat keel wind").split()


def notes(folder: Path, files: int, paragraphs: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for i in range(files):
        body = "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(60))
                           for _ in range(paragraphs))
        (folder / f"note{i}.md").write_text(f"# Note {i}\n\n{body}\n")
    return folder


def index_s(embedder, folder: Path, threads: int) -> tuple[float, int]:
    store = open_store(Path(tempfile.mkdtemp(prefix="mlxchat-embed-")) / "s.db")
    os.environ[THREADS] = str(threads)  # what the embedder reads on each call
    started = time.perf_counter()
    report = Indexer(store.documents, embedder).add("n", [folder])
    store.close()
    return time.perf_counter() - started, report.chunks_added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2,
                        help="what numpy's BLAS starts by itself here (one a core)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mlxchat-embed-notes-"))
    folders = {"small": notes(root / "small", 5, 4), "big": notes(root / "big", 16, 8)}
    embedder = load_embedder(backend="numpy")
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for name, folder in folders.items():
            for threads in (args.threads, 1):
                seconds, chunks = index_s(embedder, folder, threads)
                times.setdefault((name, threads), []).append(seconds)
                print(f"{name}: {chunks} chunks, {threads} thread(s): {seconds:.2f} s",
                      flush=True)
    out = []
    for name in folders:
        one, default = (min(times[(name, t)]) for t in (1, args.threads))
        out += [f"{name}_s_1={one:.2f}", f"{name}_s_default={default:.2f}",
                f"{name}_speedup={default / one:.1f}"]
    print("ratios: " + " ".join(out))


if __name__ == "__main__":
    main()
