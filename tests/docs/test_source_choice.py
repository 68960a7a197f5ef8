"""Which retrieved chunks a message sends (issue 34): none far less relevant
than the best, byte-identical text once (naming every file that has it), and
no more than the budget, whose default is a share of the window.

Real MLX on tiny random models (a byte-level chat model, so a token is a byte);
the tiny random BERT embeds with the real tokenizer."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from mlxchat.config import Settings
from mlxchat.docs.relevance import DENSE_FLOOR, RELATIVE_FLOOR, by_text, relevant
from mlxchat.docs.search import Hit, rrf
from mlxchat.engine.core import ChatEngine
from mlxchat.generation import DOCS_BUDGET_SHARE
from mlxchat.session.conversation import Conversation
from mlxchat.sources import sources_block
from mlxchat.store import open_store

from .conftest import tiny_embedder


def conversation(loaded, db: Path) -> Conversation:
    settings = Settings()
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 4
    return Conversation(settings=settings, store=open_store(db), engine=ChatEngine(loaded),
                        model_spec="tiny", embedder=tiny_embedder)


def hit(chunk_id: int, score: float, *, bm25: int | None, dense: int | None,
        similarity: float | None = None, text: str = "") -> Hit:
    return Hit(chunk_id, f"/n/{chunk_id}.md", 1, 2, "", text or f"chunk {chunk_id}", 9, score,
               bm25, dense, similarity=similarity)


def test_the_floor_leaves_out_what_only_one_side_found_beside_what_both_agree_on():
    # Fused as the search fuses: chunk 1 first on both sides, 2 second on both,
    # 3 found by the embeddings alone (second there), 4 by BM25 alone (third).
    fused = dict(rrf([[1, 2, 4], [1, 3, 2]]))
    hits = [hit(1, fused[1], bm25=1, dense=1, similarity=0.6),
            hit(2, fused[2], bm25=2, dense=3, similarity=0.5),
            hit(3, fused[3], bm25=None, dense=2, similarity=0.55),
            hit(4, fused[4], bm25=3, dense=None)]
    hits.sort(key=lambda h: -h.score)
    assert fused[3] < RELATIVE_FLOOR * fused[1] <= fused[2]  # 0.016 beside 0.033
    assert [h.chunk_id for h in relevant(hits)] == [1, 2]
    # With no word matched anywhere, closeness in meaning decides alone.
    dense_only = dict(rrf([[], [5, 6, 7]]))
    hits = [hit(5, dense_only[5], bm25=None, dense=1, similarity=0.31),
            hit(6, dense_only[6], bm25=None, dense=2, similarity=0.27),
            hit(7, dense_only[7], bm25=None, dense=3, similarity=DENSE_FLOOR / 2)]
    assert [h.chunk_id for h in relevant(hits)] == [5, 6]
    assert relevant([]) == []


def test_identical_text_is_grouped_under_its_best_hit():
    hits = [hit(1, 0.03, bm25=1, dense=1, text="same"), hit(2, 0.02, bm25=2, dense=2),
            hit(3, 0.01, bm25=3, dense=3, text="same")]
    groups = by_text(hits)
    assert [(g.hit.chunk_id, [t.chunk_id for t in g.twins]) for g in groups] == [(1, [3]),
                                                                                (2, [])]


@pytest.fixture
def notes(tmp_path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "herons.md").write_text("# Herons\n\nHerons nest in colonies called "
                                      "heronries, high in old trees.\n")
    (folder / "owls.md").write_text("# Owls\n\nOwls hunt at night.\n")
    return folder


def test_a_message_sends_neither_the_irrelevant_nor_the_same_text_twice(tiny, tmp_path,
                                                                         notes):
    shutil.copyfile(notes / "herons.md", notes / "herons-copy.md")  # byte-identical
    conv = conversation(tiny, tmp_path / "s.db")
    conv.retrieval.add("notes", [notes])
    conv.retrieval.use("notes")
    list(conv.turns.send("Where do herons nest?"))
    user = conv.messages[-2]
    # One source: the heron text, once, naming both files; owls, which match no
    # word of the question, below the floor.
    assert len(user.sources) == 1
    heron = user.sources[0]
    paths = {Path(heron.path).name, *(Path(p.split(":")[0]).name for p in heron.also)}
    assert paths == {"herons.md", "herons-copy.md"} and len(heron.also) == 1
    assert user.content.count("heronries") == 1
    assert f"(also {heron.also[0]})" in sources_block("notes", user.sources)
    assert f"(also {heron.also[0]})" in heron.describe()
    # Stored and read back with the message, the other place included.
    assert conv.reload().messages[-2].sources == user.sources
    conv.close()


def test_the_default_budget_is_an_eighth_of_the_window(tmp_path):
    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model

    window = 8192
    loaded = load_folder(write_tiny_model(tmp_path / "m", context_window=window), name="tiny",
                         spec="tiny")
    folder = tmp_path / "birds"
    folder.mkdir()
    for i in range(24):  # many small notes, all about herons: k alone would send 20
        (folder / f"heron-{i:02}.md").write_text(
            f"# Heron note {i}\n\nHerons wade at pond {i} and eat fish number {i}.\n")
    conv = conversation(loaded, tmp_path / "s.db")
    conv.retrieval.add("birds", [folder])
    conv.retrieval.use("birds")
    conv.update_generation(dataclasses.replace(conv.session.settings, docs_k=20))
    found = conv.retrieval.retrieve("What do herons eat?")
    assert found.budget == window // DOCS_BUDGET_SHARE == 1024
    assert found.left_out > 0  # the budget, not k, stopped it
    assert 0 < found.block_tokens <= window // 8
    # A budget set by hand is kept as set.
    conv.update_generation(dataclasses.replace(conv.session.settings, docs_budget=2000))
    assert conv.retrieval.retrieve("What do herons eat?").block_tokens > window // 8
    conv.close()


def test_a_long_note_that_alone_answers_still_sends_its_chunks(tmp_path):
    # Chunks after a file's best rank after other files' best (the spread),
    # so unrelated notes come before the heron page's later chunks; the
    # floor, not a cut at k, must decide, and it keeps the heron chunks.
    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model

    loaded = load_folder(write_tiny_model(tmp_path / "m", context_window=32768), name="tiny",
                         spec="tiny")  # a token a byte: room for five long chunks
    folder = tmp_path / "mixed"
    folder.mkdir()
    section = ("## Colony {n}\n\nHerons nest in colony {n} high in old trees; the herons "
               "of this heronry return each spring and every heron pair raises young. " * 6)
    (folder / "herons.md").write_text("# Herons\n\n" + "\n\n".join(
        section.format(n=n) for n in range(12)))
    for i in range(12):
        (folder / f"other-{i:02}.md").write_text(f"# Note {i}\n\nThe tide table for "
                                                 f"harbour {i} lists the hours of water.\n")
    conv = conversation(loaded, tmp_path / "s.db")
    conv.retrieval.add("mixed", [folder])
    conv.retrieval.use("mixed")
    conv.update_generation(dataclasses.replace(conv.session.settings, docs_k=5,
                                               docs_budget=100_000))
    found = conv.retrieval.retrieve("Where do herons nest?")
    assert [Path(s.path).name for s in found.sources] == ["herons.md"] * 5
    conv.close()
