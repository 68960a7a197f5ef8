"""/docs and /sources on a real Conversation (tiny model, the bundled embedder)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import send


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "work" / "notes"
    folder.mkdir(parents=True)
    (folder / "boats.md").write_text("# Boats\n\nSailing boats need wind and a keel.\n")
    (folder / "trains.md").write_text("# Trains\n\nTrains run on rails.\n")
    (folder / "planes.md").write_text("# Planes\n\nPlanes need lift.\n")
    return folder


def test_add_use_list_and_the_session_retrieves(registry, ctx, conv, notes):
    r = registry.run("/docs", ctx)
    assert r.ok and "No document collections yet" in r.text
    r = registry.run("/docs add notes", ctx)  # a path alone: named after the folder
    assert r.ok and r.text.startswith("notes: 3 files indexed (3 chunks"), r.text
    assert r.text.endswith("This session now retrieves from notes.")
    assert conv.session.settings.docs == "notes"  # stored with the session
    r = registry.run("/docs", ctx)
    assert r.rows[0][:3] == ("notes (in use)", "3", "3")
    assert r.text.startswith("This session retrieves from notes: up to 5 chunks per message")
    send(conv, "what do sailing boats need")
    r = registry.run("/sources", ctx)
    sources = conv.messages[-2].sources
    assert r.kind == "table" and r.text.startswith(f"{len(sources)} sources from notes")
    places = [row[1] for row in r.rows]
    assert f"{notes}/boats.md:1-3" in places
    assert [row[:3] + row[4:] for row in r.rows] == [
        (f"[{s.n}]", s.place, s.heading, f"{s.tokens:,}", "") for s in sources]
    # Relevance in words, against the best of the list: never a bare 0.033.
    best = max(s.score for s in sources)
    assert r.columns[3] == "relevance" and [row[3] for row in r.rows] == [
        "best match" if s.score == best else f"{round(100 * s.score / best)}% of the best"
        for s in sources]


def test_sources_say_in_words_what_did_not_fit_the_budget(registry, ctx, conv, notes):
    for name, need in (("keel", "a keel"), ("sails", "sails and a mast"), ("crew", "a crew")):
        (notes / f"{name}.md").write_text(f"# Sailing boats\n\n{f'Sailing boats need {need}. ' * 3}\n")
    assert registry.run("/docs add notes", ctx).ok
    assert registry.run("/docs budget 260", ctx).ok
    question = "what do sailing boats need"
    found = conv.retrieval.retrieve(question, remember=False)
    assert found.sources and found.left_out  # some fit, some do not
    r = registry.run(f"/docs search {question}", ctx)
    assert (f"{found.left_out} more sources matched but did not fit the "
            f"{found.budget:,}-token budget") in r.text
    assert "over" not in r.text and "score" not in r.columns
    assert registry.run("/docs budget 64", ctx).ok
    nothing = registry.run(f"/docs search {question}", ctx)
    assert nothing.text.startswith("Nothing in notes fits: ") and "none fits the" in nothing.text


def test_tuning_and_bad_input_change_nothing(registry, ctx, conv, notes):
    assert registry.run("/docs add notes", ctx).ok
    before = conv.session.settings
    for line, words in [("/docs k 0", "docs_k must be 1 to 20"),
                        ("/docs budget 10", "docs_budget must be auto or a whole number >= 64"),
                        ("/docs use nope", "No document collection named 'nope'"),
                        ("/docs use bad/name", "Bad collection name"),
                        ("/docs add", "Usage: /docs add [NAME] PATH..."),
                        ("/docs add x missing-folder", "No such file or folder"),
                        ("/docs frob", "Unknown /docs action 'frob'")]:
        r = registry.run(line, ctx)
        assert not r.ok and words in r.text, (line, r.text)
        assert "\n" not in r.text
    assert conv.session.settings == before
    assert registry.run("/docs k 2", ctx).ok and conv.session.settings.docs_k == 2
    assert registry.run("/docs budget 100", ctx).ok
    assert conv.session.settings.docs_budget == 100
    assert registry.run("/docs budget auto", ctx).ok
    assert conv.session.settings.docs_budget is None
    r = registry.run("/docs search sailing boats wind", ctx)
    assert r.kind == "table" and r.rows[0][1] == f"{notes}/boats.md:1-3"
    assert conv.retrieval.last is None  # a preview: nothing remembered, nothing sent
    assert registry.run("/docs use off", ctx).ok and conv.session.settings.docs is None
    assert registry.run(f"/docs use {conv.retrieval.collections()[0].name}", ctx).ok
    assert registry.run("/docs off now", ctx).kind == "error" and conv.session.settings.docs
    assert registry.run("/docs off", ctx).ok and conv.session.settings.docs is None


def test_cancelling_an_index_keeps_whole_files_and_update_carries_on(registry, ctx, conv, notes):
    seen: list[tuple[str, int | None, int | None]] = []

    def progress(line, done, total):
        seen.append((line, done, total))
        ctx.cancel.set()  # escape, as the UI does, after the first file
    ctx.progress = progress
    r = registry.run("/docs add trips notes", ctx)
    assert r.ok and r.text.startswith("Cancelled: 1 file of trips indexed"), r.text
    assert seen[0][0].startswith("indexing 1/3 files · 0/1 chunks") and seen[0][1:] == (0, 3)
    info = conv.retrieval.collection("trips")
    assert (info.files, info.chunks) == (1, 1)  # whole files only
    assert conv.session.settings.docs is None  # a cancelled add is not put in use
    ctx.progress = None
    r = registry.run("/docs update trips", ctx)
    assert r.ok and "2 files indexed" in r.text and "1 unchanged" in r.text


def test_remove_asks_then_keeps_the_sources_of_past_messages(registry, ctx, conv, notes):
    assert registry.run("/docs add notes", ctx).ok
    send(conv, "trains")
    sources = conv.messages[-2].sources
    r = registry.run("/docs remove notes", ctx)
    assert r.kind == "confirm" and "3 files" in r.text
    done = r.confirm.accept()
    assert done.ok and "keep their sources" in done.text
    assert conv.session.settings.docs is None and conv.retrieval.collections() == []
    assert conv.reload().messages[0].sources == sources
    r = registry.run("/sources", ctx)
    assert r.kind == "table" and len(r.rows) == len(sources)


def test_set_docs_checks_the_collection(registry, ctx, conv, notes):
    r = registry.run("/set docs nope", ctx)
    assert not r.ok and "No document collection named 'nope'" in r.text
    assert conv.session.settings.docs is None
    assert registry.run("/docs add notes", ctx).ok
    assert registry.run("/set docs off", ctx).ok and conv.session.settings.docs is None
    assert registry.run("/set docs notes", ctx).ok and conv.session.settings.docs == "notes"


def test_links_out_of_the_folder_are_followed_only_when_asked(registry, ctx, conv, notes):
    outside = notes.parent / "elsewhere"
    outside.mkdir()
    (outside / "far.md").write_text("# Far\n\nA note kept outside the folder.\n")
    (notes / "far").symlink_to(outside, target_is_directory=True)
    r = registry.run("/docs add kept notes", ctx)
    assert r.ok and r.text.startswith("kept: 3 files indexed"), r.text
    assert f"skipped {notes}/far: a symlink to {outside}, outside {notes}" in r.text
    r = registry.run("/docs add both notes --follow-links", ctx)
    assert r.ok and r.text.startswith("both: 4 files indexed"), r.text
    assert conv.retrieval.collection("both").follow_links
    assert not conv.retrieval.collection("kept").follow_links


def test_the_add_summary_names_each_skipped_path_once_on_a_line_of_its_own(registry, ctx,
                                                                           notes):
    (notes / "x.bin").write_bytes(b"\x00\x01binary\x00" * 10)
    r = registry.run("/docs add notes", ctx)
    took = re.search(r"3 chunks in ([\d.]+ m?s)\)", r.text).group(1)  # what timing decides
    assert r.text == (
        f"notes: 3 files indexed (3 chunks in {took}), 0 unchanged, 0 removed, "
        "1 skipped. This session now retrieves from notes.\n"
        f"skipped {notes}/x.bin: a binary file")


def test_docs_search_can_name_a_collection(registry, ctx, conv, notes, tmp_path):
    assert registry.run("/docs add notes", ctx).ok  # made and in use
    other = tmp_path / "kitchen"  # not under the working folder: "recipes" is a name
    other.mkdir(parents=True)
    (other / "bread.md").write_text("# Bread\n\nKnead the dough for ten minutes, then let it rise.\n")
    assert registry.run(f"/docs add recipes {other}", ctx).ok
    assert registry.run("/docs use notes", ctx).ok
    named = registry.run("/docs search recipes knead the dough", ctx)
    assert named.kind == "table" and named.rows[0][1].startswith(f"{other}/bread.md:")
    assert conv.session.settings.docs == "notes" and conv.retrieval.last is None
    # Without a name, the collection in use; with none in use, a name is needed.
    in_use = registry.run("/docs search sailing boats wind", ctx)
    assert in_use.kind == "table" and in_use.rows[0][1] == f"{notes}/boats.md:1-3"
    assert registry.run("/docs off", ctx).ok
    bread = registry.run("/docs search recipes bread", ctx)
    assert bread.kind == "table", bread.text
    refused = registry.run("/docs search sailing boats", ctx)
    assert refused.kind == "error" and "/docs search NAME QUERY" in refused.text
