"""The retrieval benches' corpora and question sets, and an index of each
that can be kept between runs.

Two sets from what every Python carries, so they are the same on every
machine with the same Python minor version, and one from this checkout:

- ``topics``: Python's language reference topics (``pydoc_data.topics``), one
  file a topic, with the 50 questions of ``bench/retrieval.py``. Ranking
  parameters are tuned on this set.
- ``modules``: the help pages (``pydoc``'s plain text, as ``help(module)``
  shows them, the FILE section taken out as it names this machine's paths) of
  the standard-library modules listed in ``bench/data/stdlib_help_questions.json``,
  one file a module (object addresses taken out, which differ in every
  process), with the paraphrased questions written there. It is kept
  apart: never tuned on, reported once.
- ``docs``: this project's own ``docs/*.md`` as they stand, one file a page,
  with the questions of ``bench/data/docs_questions.json``. Each names the
  passage that answers it: a hit counts only when its text holds it, so a
  chunk that is only the heading above the answer does not (issue 47).

With ``cache``, the corpus and its index live there and are reused: a file
is written only when its text differs, so the indexer's update finds nothing
changed and takes milliseconds instead of minutes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SETS = ("topics", "modules", "docs")
DATA = Path(__file__).resolve().parent / "data" / "stdlib_help_questions.json"
DOCS_DATA = Path(__file__).resolve().parent / "data" / "docs_questions.json"
DOCS = Path(__file__).resolve().parents[1] / "docs"
_FILE_SECTION = re.compile(r"^FILE\n(?:    .*\n)+\n?", re.M)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@dataclass(frozen=True)
class QuestionSet:
    name: str
    texts: dict[str, str]
    """File stem -> text of each document of the corpus."""
    questions: list[tuple[str, str]]
    """(stem of the file that answers it, question)."""
    suffix: str
    passages: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Question -> passages, one of which an answering hit's text holds (all
    of the file's hits answer a question without any)."""

    def answers(self, hit, stem: str, question: str) -> bool:
        if Path(hit.path).stem != stem:
            return False
        wanted = self.passages.get(question)
        text = " ".join(hit.text.split())
        return not wanted or any(" ".join(p.split()) in text for p in wanted)


def topics_set(questions: list[tuple[str, str]]) -> QuestionSet:
    from pydoc_data.topics import topics

    return QuestionSet("topics", dict(topics), questions, ".rst")


_RENDER = """
import importlib, json, pydoc, sys
print(json.dumps({m: pydoc.render_doc(importlib.import_module(m), renderer=pydoc.plaintext)
                  for m in sys.argv[1:]}))
"""


def help_pages(modules: list[str]) -> dict[str, str]:
    """``help(module)`` of each as plain text, rendered in a fresh isolated
    interpreter (what else a process imported changes some pages: with
    mlxchat loaded, ``reprlib``'s showed other parameter names), without the
    FILE section and the memory addresses in default values' reprs (new in
    every process)."""
    done = subprocess.run([sys.executable, "-I", "-c", _RENDER, *modules], check=True,
                          capture_output=True, text=True)
    return {m: _ADDRESS.sub("", _FILE_SECTION.sub("", text))
            for m, text in json.loads(done.stdout).items()}


def modules_set() -> QuestionSet:
    data = json.loads(DATA.read_text())
    texts = help_pages(data["modules"])
    questions = [(q["module"], q["question"]) for q in data["questions"]]
    unknown = {m for m, _ in questions} - set(texts)
    if unknown:
        raise SystemExit(f"questions about modules not in the corpus: {sorted(unknown)}")
    return QuestionSet("modules", texts, questions, ".txt")


def docs_set() -> QuestionSet:
    data = json.loads(DOCS_DATA.read_text())
    texts = {path.stem: path.read_text() for path in sorted(DOCS.glob("*.md"))}
    questions, passages = [], {}
    for q in data["questions"]:
        stem = Path(q["file"]).stem
        flat = " ".join(texts.get(stem, "").split())
        missing = [p for p in q["passages"] if " ".join(p.split()) not in flat]
        if missing:
            raise SystemExit(f"docs/{q['file']} no longer holds {missing}: update "
                             f"{DOCS_DATA.name}")
        questions.append((stem, q["question"]))
        passages[q["question"]] = tuple(q["passages"])
    return QuestionSet("docs", texts, questions, ".md", passages)


def write_corpus(qs: QuestionSet, folder: Path) -> int:
    """Write the corpus into ``folder``; files whose text is unchanged are left
    alone (their mtime kept). Returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for stem, text in qs.texts.items():
        path = folder / f"{stem}{qs.suffix}"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written += 1
    return written


def indexed(qs: QuestionSet, root: Path, store, embedder):
    """The set's collection (named after it) in ``store``, its corpus under
    ``root``: indexed when new, else updated (only changed files re-read).
    Returns (report, seconds, whether it was reused)."""
    from mlxchat.docs import Indexer
    from mlxchat.store.documents import CollectionNotFound

    folder = root / qs.name
    write_corpus(qs, folder)
    indexer = Indexer(store.documents, embedder)
    started = time.perf_counter()
    try:
        store.documents.get(qs.name)
    except CollectionNotFound:
        report = indexer.add(qs.name, [folder])
        return report, time.perf_counter() - started, False
    report = indexer.update(qs.name)
    return report, time.perf_counter() - started, True
