"""Which hits are worth sending with a message, and which are the same text.

Reciprocal rank fusion gives a hit at most ``1 / (RRF_K + 1)`` (about 0.0164)
from each side, so a hit both BM25 and the embeddings rank near the top scores
about twice one that only one side found. ``relevant`` keeps the hits that
score at least ``RELATIVE_FLOOR`` of the best: beside a best hit both sides
agree on, a hit only one side found (0.016 beside 0.033) is left out, while
hits both sides found stay. Ranked by score alone, on the bench's 50 questions
over Python's reference (``bench/retrieval.py``) every top-5 hit scored at
least 0.89 of the best. Spread across files (``docs.diversity``) the top 5
also holds other files' weaker best hits, and the floor leaves out those only
one side found: the right topic is among the sources a message sends for 0.84
of the questions (0.90 in the spread top 5, 0.80 sent when ranked by score
alone; ``bench/retrieval_ranking.py``). Hits come in spread order; the first
is always the best scored.

A hit whose words BM25 did not match must also be close in meaning: a cosine
similarity of at least ``DENSE_FLOOR`` (all-MiniLM-L6-v2 puts unrelated text
below ~0.2; the bench's right topics scored 0.25 and up), so a question about
nothing in the collection gets no sources rather than the least unrelated five.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from mlxchat.docs.search import Hit

RELATIVE_FLOOR = 0.6
"""A hit is sent only when its fused score is at least this share of the best's."""
DENSE_FLOOR = 0.2
"""A hit BM25 did not find is sent only when its cosine similarity is at least this."""


def relevant(hits: list[Hit], *, share: float = RELATIVE_FLOOR,
             dense_floor: float = DENSE_FLOOR) -> list[Hit]:
    """The hybrid hits (best first) above the relevance floor."""
    if not hits:
        return []
    best = hits[0].score
    return [h for h in hits if h.score >= share * best
            and (h.bm25_rank is not None or (h.similarity or 0.0) >= dense_floor)]


@dataclass
class SameText:
    """A hit and the lower-ranked hits whose text is byte-identical to it."""

    hit: Hit
    twins: list[Hit] = field(default_factory=list)


def content_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def by_text(hits: list[Hit]) -> list[SameText]:
    """The hits grouped by their text's sha256, in the order each text first ranks."""
    groups: dict[str, SameText] = {}
    for hit in hits:
        key = content_key(hit.text)
        if key in groups:
            groups[key].twins.append(hit)
        else:
            groups[key] = SameText(hit)
    return list(groups.values())
