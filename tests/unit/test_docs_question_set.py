"""The retrieval bench's set over this project's own docs/ stays answerable:
every question's passage is still in its page (an edit that drops one fails
here, not in a bench run)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_every_docs_question_still_has_its_passage():
    sys.path.insert(0, str(BENCH))
    try:
        from retrieval_corpora import docs_set
    finally:
        sys.path.remove(str(BENCH))
    qs = docs_set()  # exits naming the question whose passage is gone
    assert len(qs.questions) >= 10 and set(qs.passages) == {q for _, q in qs.questions}
    assert qs.questions[0] == ("models", "How do I import a model that Ollama already downloaded?")
    for stem, _ in qs.questions:
        assert stem in qs.texts
