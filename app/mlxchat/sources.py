"""Retrieved sources as a message carries them: what was sent, how it reads in
the message, and how a reply's ``[n]`` citations name their file and line.

Ground layer (stdlib only): the store keeps ``Source`` rows with the message,
the session layer builds them, the UI and the export show them.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SOURCES_END = "\n</sources>\nAnswer from the sources above where they help, and cite each one " \
    "you use as [n]."
"""Closes the block in front of the question: the instruction is part of it, so
a reply is asked to cite by number."""
_BLOCK = re.compile(r'\s*<sources collection="[^"\n]*">\n.*?' + re.escape(SOURCES_END) + r"\n*",
                    re.S)
_CITATION = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\](?!\()")
"""[1], [1, 2] or [1][2] (also right after a word: 'nests[1]'); not a Markdown link."""
_CODE = re.compile(r"(^|\n)(```|~~~).*?(\n\2[^\n]*(?=\n|$)|$)|`[^`\n]+`", re.S)
"""Fenced code blocks (to their closing fence, or the end while it streams) and
inline code spans: citations are never looked for inside them."""


@dataclass
class Source:
    """One retrieved chunk as it went into a message."""

    n: int
    """Its number in the message: the reply cites it as [n]."""
    collection: str
    path: str
    start_line: int
    end_line: int
    heading: str = ""
    text: str = ""
    """The chunk's text exactly as sent."""
    tokens: int = 0
    """What its entry in the block costs in the model's tokens."""
    score: float = 0.0
    chunk_id: int | None = None
    """The chunk's row when it was retrieved (gone once the file is re-indexed)."""
    stale: str | None = None
    """Why the file no longer matched its index when this was retrieved."""
    also: list[str] = field(default_factory=list)
    """Other places ('path:start-end') holding byte-identical text: sent once."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Source:
        """Unknown keys (from a newer version) are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def place(self) -> str:
        """'path:start-end', as a reader finds it."""
        return f"{self.path}:{self.start_line}-{self.end_line}"

    @property
    def short_place(self) -> str:
        """'name.md:12': what a citation in the transcript says."""
        return f"{os.path.basename(self.path)}:{self.start_line}"

    def describe(self, *, place: str | None = None, digits: int = 4,
                 stale: bool = True, best: float | None = None) -> str:
        """'[1] notes/a.md:3-9 · Install · score 0.0328 · 158 tokens', the one
        line every list of sources shows (``place`` as the reader sees it);
        given the ``best`` score of the list, the score is said as a relevance
        ('best match', '62% of the best')."""
        heading = f" · {self.heading}" if self.heading else ""
        note = f" · {self.stale}" if stale and self.stale else ""
        score = (relevance_words(self.score, best) if best is not None
                 else f"score {self.score:.{digits}f}")
        return (f"[{self.n}] {place or self.place}{self._also()}{heading} · "
                f"{score} · {self.tokens:,} tokens{note}")

    def entry(self) -> str:
        """How the chunk reads in the message: numbered, placed, then its text."""
        heading = f" · {self.heading}" if self.heading else ""
        return f"[{self.n}] {self.place}{self._also()}{heading}\n{self.text.strip()}"

    def _also(self) -> str:
        return f" (also {', '.join(self.also)})" if self.also else ""


def sources_block(collection: str, sources: list[Source]) -> str:
    """What goes in front of the question when chunks were retrieved."""
    body = "\n\n".join(s.entry() for s in sources)
    return f'<sources collection="{collection}">\n{body}{SOURCES_END}'


def with_sources(collection: str, sources: list[Source], text: str) -> str:
    """The user message as sent: the sources block, then what was typed."""
    return f"{sources_block(collection, sources)}\n\n{text}" if sources else text


def without_sources(content: str) -> str:
    """A user message less the sources blocks in front (what was typed): what
    it retrieved from a collection, what it recalled of the conversation."""
    while (found := _BLOCK.match(content)) is not None:
        content = content[found.end():]
    return content


def cite(text: str, sources: list[Source] | None) -> str:
    """A reply with each ``[n]`` naming its source's file and line, e.g.
    '[2 · setup.md:14]'; numbers no source has are left as they are."""
    if not sources:
        return text
    by_n = {s.n: s for s in sources}

    def name(found: re.Match[str]) -> str:
        numbers = [int(x) for x in found.group(1).split(",")]
        if not all(n in by_n for n in numbers):
            return found.group(0)
        return "[" + "; ".join(f"{n} · {by_n[n].short_place}" for n in numbers) + "]"
    out, at = [], 0
    for code in _CODE.finditer(text):  # prose between code regions only
        out += [_CITATION.sub(name, text[at:code.start()]), code.group(0)]
        at = code.end()
    out.append(_CITATION.sub(name, text[at:]))
    return "".join(out)


def relevance_words(score: float, best: float) -> str:
    """A fused score as a reader can weigh it: against the best of its list
    ('best match', '62% of the best'); the raw figure (0.033) means nothing."""
    if best <= 0 or score >= best:
        return "best match"
    return f"{min(99, round(100 * score / best))}% of the best"


def best_score(sources: list[Source]) -> float:
    return max((s.score for s in sources), default=0.0)


def left_out_words(left_out: int, budget: int | None = None) -> str:
    """'5 more sources matched but did not fit the 1,024-token budget'."""
    more = f"{left_out:,} more source{'s' if left_out != 1 else ''}"
    what = f"the {budget:,}-token budget" if budget else "the token budget"
    return f"{more} matched but did not fit {what}"


def below_floor_words(below_floor: int) -> str:
    """'2 more matched far less well than the best and were left out'."""
    return (f"{below_floor:,} more matched far less well than the best and "
            f"{'was' if below_floor == 1 else 'were'} left out")


def sources_summary(sources: list[Source]) -> str:
    """'3 sources · 812 tokens' for a line under the question."""
    count = len(sources)
    tokens = sum(s.tokens for s in sources)
    return f"{count} source{'s' if count != 1 else ''} · {tokens:,} tokens"
