"""Hits spread across files (issue 37): one long document cut into many chunks
cannot fill the top k while another document matches; a file's best chunk
keeps its rank, and its other chunks still follow when nothing else comes close."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat.docs import Indexer, Retriever
from mlxchat.docs.diversity import SAME_FILE_DECAY, spread
from mlxchat.docs.embedder import default_embedder
from mlxchat.docs.search import rrf

SECTION = ("## Folder {n}\n\nA mailbox keeps its messages in a folder on disk. Folder {n} is "
           "a directory that holds one file for each message, and the folder stays on disk "
           "until you remove it yourself: deleting a message removes its file, and removing "
           "the folder deletes the directory together with every message left in it. A folder "
           "can hold other folders, each a directory of its own, and a lock file keeps two "
           "programs from writing the same folder at once. Listing a folder reads the "
           "directory and returns the keys of its messages in the order they were added.\n\n")
CORPUS = {
    "mailbox.md": "# Mailbox folders\n\n" + "".join(SECTION.format(n=n) for n in range(1, 11)),
    "scratch.md": "# Scratch space\n\nTemporaryDirectory() makes a directory for scratch files; "
                  "when the with block ends it is deleted with all it holds, so nothing is "
                  "left behind.\n",
    "owls.md": "# Owls\n\nOwls hunt at night and sleep through the day in hollow trees.\n",
}
QUESTION = "How do I get a folder that is removed automatically when I am done?"


def ranked(files: list[str]) -> tuple[list[tuple[int, float]], dict[int, str]]:
    """Chunks 1.. of these files, ranked in that order on both sides, fused."""
    ids = list(range(1, len(files) + 1))
    return rrf([ids, ids]), dict(zip(ids, files))


def test_a_long_file_cannot_fill_the_top_k_while_another_file_is_ranked():
    fused, file_of = ranked(["long"] * 8 + ["short", "other"])
    order = spread(fused, file_of)
    top = [file_of[i] for i in order[:5]]
    assert {"short", "other"} <= set(top)
    assert order[0] == fused[0][0]  # the best hit keeps its place
    long_ones = [i for i in order if file_of[i] == "long"]
    assert long_ones == sorted(long_ones)  # a file's own chunks keep their order
    assert sorted(order) == sorted(i for i, _ in fused)  # nothing lost
    # Decay 1 ranks by score alone, as before.
    assert spread(fused, file_of, decay=1.0) == [i for i, _ in fused]


def test_a_files_second_chunk_stays_ahead_of_a_much_weaker_file():
    # Found by both sides vs by one side far down: the second chunk scores over
    # twice the weak one, so it still ranks ahead.
    scores = [(1, 2 / 61), (2, 2 / 62), (3, 1 / 110)]
    file_of = {1: "a", 2: "a", 3: "b"}
    assert scores[1][1] * SAME_FILE_DECAY > scores[2][1]
    assert spread(scores, file_of) == [1, 2, 3]


def test_the_decay_must_be_a_share():
    with pytest.raises(ValueError, match="within 0..1"):
        spread([(1, 1.0)], {1: "a"}, decay=1.5)


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    from mlxchat.store import open_store

    root = tmp_path_factory.mktemp("spread")
    for name, text in CORPUS.items():
        (root / name).write_text(text)
    store = open_store(":memory:")
    embedder = default_embedder()
    Indexer(store.documents, embedder).add("c", [root])
    yield store, embedder
    store.close()


def test_the_page_that_answers_comes_into_the_top_5_beside_a_long_page(collection):
    store, embedder = collection
    assert store.documents.get("c").chunks >= 8  # the long page is many chunks
    hits = Retriever(store.documents, embedder).search("c", QUESTION, k=5)
    files = [Path(h.path).name for h in hits]
    assert "scratch.md" in files, files
    # Ranked by score alone, the long page's chunks take all five places
    # (what the bench's questions over help pages met).
    flat = Retriever(store.documents, embedder, same_file_decay=1.0).search("c", QUESTION, k=5)
    assert {Path(h.path).name for h in flat} == {"mailbox.md"}
    assert hits[0].chunk_id == flat[0].chunk_id
    # Scores stay the fused ones: the floor measures against the same best.
    assert hits[0].score == max(h.score for h in hits)


def test_a_files_different_sections_are_not_pushed_down_as_its_look_alikes_are():
    """A chunk is pushed down by each of its file's chunks ahead of it as much
    as it repeats it (issue 47: server.md's section on the disk budget came
    second by score and tenth spread, behind other files' weaker chunks)."""
    scores = [(1, 0.045), (2, 0.041), (3, 0.040), (4, 0.037), (5, 0.036), (6, 0.034),
              (7, 0.032)]
    file_of = {1: "server", 2: "server", 3: "a", 4: "b", 5: "c", 6: "d", 7: "e"}
    by_file = spread(scores, file_of)
    assert by_file.index(2) >= 5  # halved: out of the top 5
    unlike = {frozenset((1, 2)): 0.4}
    alike = spread(scores, file_of, similarity=lambda a, b: unlike.get(frozenset((a, b)), 1.0))
    assert alike[:3] == [1, 3, 2]  # another section: barely pushed down (x0.96)
    # Look-alikes (cosine 1) get the whole decay, as without the embeddings.
    assert spread(scores, file_of, similarity=lambda a, b: 1.0) == by_file
