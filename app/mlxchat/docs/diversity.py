"""Hits spread across files, so one long document cannot fill the top k.

Chunks sized to the embedder's reading (about 200 word pieces) cut a long
help page into dozens of chunks, and a question near its topic matched many
of them: five hits of one page pushed out the page that answered. Here every
chunk after a file's first ranks as if its fused score were multiplied by
``SAME_FILE_DECAY`` once for each chunk of the same file ranked ahead of it,
so a file's second chunk must score about twice what another file's best
scores to rank above it, its third four times. A file's best chunk is never
moved down; when no other file comes close (one document answers) its other
chunks still follow, so the relevance floor sees them as before.

Measured with ``bench/retrieval_ranking.py`` (recall@5: the right file among
the top 5 hits; MRR over the top 10). Tuned on the bench's 50 questions over
Python's reference topics (914 chunks): ranked by score alone 0.820 / MRR
0.584; decay 0.75 0.880 / 0.616; 0.5, 0.25 and 0 all 0.900 / 0.622 (0.5 kept:
the gentlest of the best, a file's strong second chunk still beats a weak
other file). Scoring a file by its best chunks together (best + w x second)
favoured long pages and lost recall (0.860 at w 0.25, 0.780 at w 0.5, with
decay 0.5). Reported once on the held-out set, 61 questions over the help
pages of 61 standard-library modules (1,489 chunks): 0.934 / 0.831 by score
alone, 0.951 / 0.847 spread.

Each chunk ahead pushes a hit down as much as the two repeat each other:
by ``SAME_FILE_DECAY ** (cosine ** SIMILARITY_POWER)``, the cosine of their
embeddings (near 1 for the long page's look-alike chunks: the full decay; 0.4
to 0.6 for a page's different sections: 0.97 to 0.9). Spread by file alone, a
page of many sections was one document: this project's server.md holds the
flags, the disk budget and chatting while serving, and the section that
answers "What does the --kv-budget flag of mlxchat serve do?" came second
by score and tenth spread. With the cosine (bench/retrieval_ranking.py, the
answering passage among the top 5): the docs set 0.300 -> 0.600, the topics
0.900 as before (sent 0.840 -> 0.860), the help pages 0.951 as before; power
1 kept more of the decay (docs 0.400), 2 gave 0.500.

The order is computed on reciprocal-rank scores (the fused score in hybrid
mode; ``1 / (RRF_K + rank)`` of the one side otherwise), which are always
positive; the hits keep their own scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

SAME_FILE_DECAY = 0.5
"""Each chunk of a file ranked ahead of a hit multiplies the hit's score by
this to order it: 1 is no spreading, 0 puts every file's best chunk first."""


SIMILARITY_POWER = 3
"""How sharply the decay follows the likeness of two chunks of a file."""


def spread(ranked: Sequence[tuple[int, float]], file_of: Mapping[int, str], *,
           decay: float = SAME_FILE_DECAY,
           similarity: Callable[[int, int], float] | None = None) -> list[int]:
    """The ids of ``ranked`` ((id, positive score), best first) reordered so
    that a chunk ranks by its score times ``decay ** (s ** SIMILARITY_POWER)``
    for each chunk of its file ranked ahead of it, ``s`` their ``similarity``
    (a cosine, taken as 1 without it: ``decay ** n`` for the n-th chunk of a
    file); ties keep the given order, and so do a file's own chunks."""
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be within 0..1, not {decay}")
    ahead: dict[str, list[int]] = {}
    keyed = []
    for position, (item, score) in enumerate(ranked):
        earlier = ahead.setdefault(file_of.get(item, ""), [])
        factor = 1.0
        for other in earlier:
            alike = 1.0 if similarity is None else max(0.0, similarity(item, other))
            factor *= decay ** (alike ** SIMILARITY_POWER)
        earlier.append(item)
        keyed.append((-score * factor, position, item))
    keyed.sort()
    return [item for *_, item in keyed]
