"""Sources as a message carries them: the block in front of the question,
taking it off again, and citations naming their file and line."""

from __future__ import annotations

from mlxchat.chat import typed_text
from mlxchat.sources import (
    Source,
    below_floor_words,
    cite,
    left_out_words,
    relevance_words,
    with_sources,
    without_sources,
)
from mlxchat.store import title_from
from mlxchat.store.rows import sources_from_json, sources_to_json

A = Source(n=1, collection="notes", path="/home/u/notes/setup.md", start_line=12, end_line=30,
           heading="Install > Linux", text="Run make.\n", tokens=9, score=0.03)
B = Source(n=2, collection="notes", path="/home/u/notes/faq.md", start_line=3, end_line=4,
           text="No network is needed.", tokens=7, score=0.02)


def test_the_block_numbers_and_places_each_source_then_the_question_follows():
    content = with_sources("notes", [A, B], "How do I install it?")
    assert content.startswith('<sources collection="notes">\n[1] /home/u/notes/setup.md:12-30'
                              " · Install > Linux\nRun make.\n\n[2] /home/u/notes/faq.md:3-4\n")
    assert content.endswith("cite each one you use as [n].\n\nHow do I install it?")
    assert without_sources(content) == "How do I install it?"
    assert with_sources("notes", [], "plain") == "plain"
    # A message that merely looks like one keeps its text.
    assert without_sources("<sources> are mine") == "<sources> are mine"


def test_a_title_is_the_question_not_the_sources():
    content = with_sources("notes", [A], "How do I install it?")
    assert title_from(content) == "How do I install it?"
    assert typed_text(without_sources(content)) == "How do I install it?"


def test_citations_name_the_file_and_line():
    assert cite("Run make [1], offline [2].", [A, B]) == \
        "Run make [1 · setup.md:12], offline [2 · faq.md:3]."
    assert cite("Both [1, 2].", [A, B]) == "Both [1 · setup.md:12; 2 · faq.md:3]."
    # Numbers no source has, and Markdown links, are left alone; no sources: unchanged.
    assert cite("See [3] and [1](http://x).", [A, B]) == "See [3] and [1](http://x)."
    assert cite("Run make [1].", None) == "Run make [1]."


def test_sources_round_trip_through_the_stored_json():
    stored = sources_to_json([A, B])
    assert sources_from_json(stored) == [A, B]
    assert sources_to_json(None) is None and sources_from_json(None) is None
    assert sources_from_json("not json") is None  # a hand edit reads as none
    assert sources_from_json('[{"n": 1, "collection": "c", "path": "p", "start_line": 1, '
                             '"end_line": 2, "from_the_future": true}]')[0].path == "p"


def test_citations_leave_code_alone():
    assert cite("Index `items[1]` or see [1].", [A, B]) == \
        "Index `items[1]` or see [1 · setup.md:12]."
    fenced = "Like so:\n```python\nx = rows[2]\nq = [1]\n```\nthen [2][1]."
    assert cite(fenced, [A, B]) == \
        "Like so:\n```python\nx = rows[2]\nq = [1]\n```\nthen [2 · faq.md:3][1 · setup.md:12]."
    # A fence still open (a reply streaming) keeps its code as written.
    assert cite("Try:\n```\nz = [1]", [A, B]) == "Try:\n```\nz = [1]"
    assert cite("Herons nest in colonies[1].", [A]) == "Herons nest in colonies[1 · setup.md:12]."


def test_one_line_describes_a_source():
    assert A.describe() == "[1] /home/u/notes/setup.md:12-30 · Install > Linux · score 0.0300 · " \
        "9 tokens"
    stale = Source(n=2, collection="c", path="/p/x.md", start_line=1, end_line=2, tokens=1200,
                   score=0.5, stale="file deleted since indexing")
    assert stale.describe(place="~/x.md", digits=3) == \
        "[2] ~/x.md · score 0.500 · 1,200 tokens · file deleted since indexing"
    assert stale.describe(stale=False).endswith("1,200 tokens")
    assert A.describe(best=0.03).endswith("· Install > Linux · best match · 9 tokens")
    assert stale.describe(best=0.8).endswith("· 62% of the best · 1,200 tokens · file deleted "
                                             "since indexing")


def test_relevance_and_what_was_left_out_in_words():
    assert relevance_words(0.0161, 0.0328) == "49% of the best"
    assert relevance_words(0.0328, 0.0328) == "best match"
    assert relevance_words(0.0327999, 0.0328) == "99% of the best"  # never 100 short of it
    assert relevance_words(0.0, 0.0) == "best match"
    assert left_out_words(1, 1024) == "1 more source matched but did not fit the 1,024-token budget"
    assert left_out_words(5) == "5 more sources matched but did not fit the token budget"
    assert below_floor_words(2) == "2 more matched far less well than the best and were left out"
