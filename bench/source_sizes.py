"""What retrieval sends: chunk sizes in the embedder's word pieces, and the
sources a short question gets, on real text files of this machine.

Indexes a handful of licence and copyright files (``/usr/share/common-licenses``,
``/usr/share/doc/*/copyright``; two of them byte-identical) with the bundled
MiniLM embedder, then asks short questions through a session on the bundled
SmolLM2-135M (its tokenizer counts the sources; nothing is generated). Prints
the chunks' word pieces as the embedder reads them (heading path, text, [CLS]
and [SEP]) and what each question sends. The last line is:

ratios: chunks=N pieces_max=X pieces_median=X over_256=N sources_tokens_median=X
        sources_tokens_max=X sources_per_question=X
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see bench/retrieval.py
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import shutil  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from tokenizers import Tokenizer  # noqa: E402

from mlxchat.config import Settings  # noqa: E402
from mlxchat.docs.embedder import default_embedder  # noqa: E402
from mlxchat.docs.indexer import embedding_text  # noqa: E402
from mlxchat.docs.word_pieces import bundled_model_zip  # noqa: E402
from mlxchat.engine.core import ChatEngine  # noqa: E402
from mlxchat.models import load_model  # noqa: E402
from mlxchat.session.conversation import Conversation  # noqa: E402
from mlxchat.store import open_store  # noqa: E402

FILES = [Path("/usr/share/common-licenses") / n for n in ("Apache-2.0", "MPL-2.0", "Artistic",
                                                          "BSD")]
FILES += [Path("/usr/share/doc") / p / "copyright"
          for p in ("bash", "coreutils", "tar", "gzip", "sqlite3", "libsqlite3-0")]
QUESTIONS = ["What is the warranty?", "Can I sell modified copies?",
             "Who wrote sqlite?", "How do I apply the license to my work?"]


def word_pieces() -> Tokenizer:
    """The embedder's own tokenizer, counting without truncation."""
    with zipfile.ZipFile(bundled_model_zip()) as zf:
        tokenizer = Tokenizer.from_str(zf.read("tokenizer.json").decode())
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="mlxchat-bench-sizes-"))
    try:
        docs = folder / "docs"
        docs.mkdir()
        for path in FILES:
            if path.is_file():
                name = path.name if path.parent.name == "common-licenses" else path.parent.name
                shutil.copyfile(path, docs / f"{name}.txt")
        settings = Settings()
        conv = Conversation(settings=settings, store=open_store(folder / "s.db"),
                            engine=ChatEngine(load_model("smollm2-135m")), model_spec="bench",
                            embedder=default_embedder)
        report = conv.retrieval.add("licenses", [docs])
        conv.retrieval.use("licenses")
        print(f"indexed {report.files_indexed} files into {report.chunks_added} chunks")
        tok = word_pieces()
        with sqlite3.connect(folder / "s.db") as db:  # every chunk, as it was embedded
            rows = db.execute("SELECT heading, text FROM doc_chunks").fetchall()
        pieces = [len(tok.encode(embedding_text(h, t)).ids) for h, t in rows]
        print(f"chunk word pieces (with [CLS]/[SEP] and heading): max {max(pieces)}, "
              f"median {statistics.median(pieces):.0f}, "
              f"{sum(p > 256 for p in pieces)} of {len(pieces)} over the embedder's 256")
        sent = []
        for question in QUESTIONS:
            found = conv.retrieval.retrieve(question, remember=False)
            sent.append((found.block_tokens, len(found.sources)))
            print(f"{question!r}: {len(found.sources)} sources, block {found.block_tokens} "
                  f"tokens of a {found.budget} budget; "
                  + ", ".join(f"{Path(s.path).name}:{s.start_line} {s.score:.4f} {s.tokens}t"
                              for s in found.sources))
        tokens = [t for t, _ in sent]
        print(f"ratios: chunks={len(pieces)} pieces_max={max(pieces)} "
              f"pieces_median={statistics.median(pieces):.0f} "
              f"over_256={sum(p > 256 for p in pieces)} "
              f"sources_tokens_median={statistics.median(tokens):.0f} "
              f"sources_tokens_max={max(tokens)} "
              f"sources_per_question={statistics.mean(n for _, n in sent):.2f}")
        conv.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
