"""Cutting a document's text into chunks that keep their place.

The text is split into blocks (paragraphs, headings, fenced code blocks);
blocks are packed into chunks of about ``target`` word pieces and never more
than ``limit``, a heading starting a new chunk once the current one has some
body. Sizes are counted with the embedder's own tokenizer (``WordPieces``), so
the embedder reads every chunk whole, its heading path (up to
``HEADING_PIECES``) included. A chunk cut for size starts with the last few
lines of the one before (the overlap). Every chunk keeps its first and last
line (1-based) and the heading path in effect where it starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from mlxchat.docs.word_pieces import WordPieces, bundled_word_pieces

CHUNKER = 2
"""This chunking's version, recorded with each file it cuts: an update re-chunks
a file cut by another. 2: a heading is never a chunk alone, nor cut off from
the text under it."""
LONG_LINE = 2000
"""Characters; a longer line (minified code) is cut into pieces of this size,
all with its line number (as is a line of more than ``target`` word pieces)."""
HEADING_PIECES = 24
"""Word pieces of a chunk's heading path embedded with it (its last titles):
the room a chunk leaves for them."""


@dataclass(frozen=True)
class ChunkSizes:
    """In the embedder's word pieces; the defaults are all-MiniLM-L6-v2's
    (``reading(254)``: 256 less [CLS] and [SEP])."""

    target: int = 201
    limit: int = 230
    overlap: int = 32
    heading_break: int = 46
    """A heading starts a new chunk when the current one has this many pieces."""

    @classmethod
    def reading(cls, pieces: int) -> ChunkSizes:
        """Sizes for an embedder that reads ``pieces`` word pieces of text: the
        limit leaves ``HEADING_PIECES`` of them for the heading path."""
        limit = max(pieces - HEADING_PIECES, 8)
        return cls(target=limit * 7 // 8, limit=limit, overlap=limit // 7,
                   heading_break=limit // 5)


@dataclass(frozen=True)
class Chunk:
    start_line: int
    end_line: int
    heading: tuple[str, ...]
    text: str
    tokens: int


@dataclass(frozen=True)
class _Block:
    first: int
    """Row index of its first row; it ends where the next block starts."""
    heading: tuple[str, ...] | None
    """The heading path this block sets, when it is a heading."""


_ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_ADORN = re.compile(r"^([=\-~^*+#`'\":.])\1{2,}\s*$")
_PY_DEF = re.compile(r"^(\s*)(?:async\s+def|def|class)\s+(\w+)")
_CODE_DEF = re.compile(r"^(?:export\s+)?(?:pub\s+)?(?:async\s+)?"
                       r"(?:fn|func|function|class|struct|impl|interface|enum|trait)\s+(\w+)")


def _long_line_parts(line: str) -> list[str]:
    """A line in parts of at most ``LONG_LINE`` characters, cut after a space
    where one is in a part's second half."""
    parts = []
    while len(line) > LONG_LINE:
        space = line.rfind(" ", LONG_LINE // 2, LONG_LINE)
        at = space + 1 if space >= 0 else LONG_LINE
        parts.append(line[:at])
        line = line[at:]
    return parts + [line]


def _rows(text: str, first_line: int, pieces: WordPieces,
          most: int) -> tuple[list[tuple[int, str]], list[int]]:
    """The text's lines (number, text) and their word pieces; a line of more
    than ``most`` pieces (or ``LONG_LINE`` characters) is cut between words,
    every part with its line number."""
    rows = []
    for number, line in enumerate(text.split("\n"), first_line):
        line = line.rstrip("\r")
        rows.extend((number, part) for part in _long_line_parts(line))
    tokens = pieces.count([line for _, line in rows])
    if max(tokens, default=0) <= most:
        return rows, tokens
    cut_rows, cut_tokens = [], []
    for (number, line), n in zip(rows, tokens):
        parts = pieces.cut(line, most) if n > most else [line]
        cut_rows.extend((number, part) for part in parts)
        cut_tokens.extend(pieces.count(parts) if n > most else [n])
    return cut_rows, cut_tokens


class _Headings:
    """The heading path as headings of each level are met."""

    def __init__(self) -> None:
        self.path: tuple[str, ...] = ()
        self.adornments: list[str] = []  # reStructuredText: levels in order first seen

    def set(self, level: int, title: str) -> tuple[str, ...]:
        self.path = self.path[:level - 1] + (title.strip(),)
        return self.path

    def adorned(self, char: str, title: str) -> tuple[str, ...]:
        if char not in self.adornments:
            self.adornments.append(char)
        return self.set(self.adornments.index(char) + 1, title)


def _heading_at(rows, i: int, kind: str, heads: _Headings) -> tuple[int, tuple[str, ...]] | None:
    """(rows the heading takes, new path) when a heading starts at row i."""
    line = rows[i][1]
    nxt = rows[i + 1][1] if i + 1 < len(rows) else ""
    if kind == "code":
        m = _PY_DEF.match(line)
        if m:
            return 1, heads.set(min(1 + len(m.group(1).expandtabs()) // 4, 3), m.group(2))
        m = _CODE_DEF.match(line)
        return (1, heads.set(1, m.group(1))) if m else None
    if kind == "markdown" and (m := _ATX.match(line)):
        return 1, heads.set(len(m.group(1)), m.group(2))
    if line.strip() and not _ADORN.match(line) and _ADORN.match(nxt) \
            and len(nxt.strip()) >= len(line.strip()) - 1:
        if kind == "markdown" and nxt.strip()[0] in "=-":
            return 2, heads.set(1 if nxt.strip()[0] == "=" else 2, line)
        if kind == "rst":
            return 2, heads.adorned(nxt.strip()[0], line)
    if kind == "rst" and _ADORN.match(line) and i + 2 < len(rows) \
            and rows[i + 2][1].strip() == line.strip() and rows[i + 1][1].strip():
        return 3, heads.adorned(line.strip()[0] * 2, rows[i + 1][1])  # over- and underline
    return None


def _blocks(rows, kind: str, heads: _Headings) -> list[_Block]:
    """Blocks: a heading, a fenced code block, or lines up to a blank line."""
    blocks: list[_Block] = []
    i, fence, open_block = 0, None, False
    while i < len(rows):
        line = rows[i][1]
        if fence is not None:
            if line.lstrip().startswith(fence):
                fence = None
            i += 1
            continue
        if kind == "markdown" and (m := _FENCE.match(line)):
            blocks.append(_Block(i, None))
            fence, open_block = m.group(1), False
            i += 1
            continue
        head = _heading_at(rows, i, kind, heads)
        if head is not None:
            blocks.append(_Block(i, head[1]))
            i += head[0]
            open_block = False
            continue
        if not line.strip():
            open_block = False
        elif not open_block:
            blocks.append(_Block(i, None))
            open_block = True
        i += 1
    if not blocks or blocks[0].first != 0:
        blocks.insert(0, _Block(0, None))
    return blocks


class _Packer:
    """Packs blocks of rows into chunks. The chunk being packed holds rows
    ``start``..: those before ``cut`` are the previous chunk's overlap, the rest
    its own body; ``size`` counts both. Headings go with the text under them:
    a chunk is never cut after a heading, nor made of headings alone (unless
    the text has nothing else)."""

    def __init__(self, rows, tokens: list[int], sizes: ChunkSizes,
                 headings: dict[int, tuple[tuple[str, ...], range]], path: tuple[str, ...]):
        """``headings``: each heading block's path and rows, by its first row."""
        self.rows, self.tokens, self.sizes, self.headings = rows, tokens, sizes, headings
        self.heading_rows = {row for _, rows_of in headings.values() for row in rows_of}
        self.chunks: list[Chunk] = []
        self.start = self.cut = self.size = 0
        self.path = self.heading_path = path
        self.lead: tuple[int, tuple[str, ...]] | None = None
        """The headings packed last (first row, path): they start the next chunk."""

    def body(self) -> int:
        """Pieces of the chunk being packed beyond its overlap."""
        return self.size - sum(self.tokens[self.start:self.cut])

    def only_headings(self, upto: int) -> bool:
        return all(not self.tokens[r] or r in self.heading_rows for r in range(self.cut, upto))

    def has_text(self, upto: int) -> bool:
        """Whether the chunk holds text of its own before row ``upto``."""
        return bool(self.body()) and not self.only_headings(upto)

    def flush(self, end: int, overlap: bool, upto: int | None = None) -> None:
        """Close the chunk before row ``end``; rows ``end``..``upto`` are packed already."""
        body = self.rows[self.start:end]
        while body and not body[-1][1].strip():
            body.pop()
        while body and not body[0][1].strip():
            body.pop(0)
        if any(self.tokens[self.cut:end]) and not (self.chunks and self.only_headings(end)):
            self.chunks.append(Chunk(body[0][0], body[-1][0], self.path,
                                     "\n".join(line for _, line in body),
                                     sum(self.tokens[self.start:end])))
        back = end
        if overlap:
            kept = 0
            while back - 1 > self.start and kept + self.tokens[back - 1] <= self.sizes.overlap:
                back -= 1
                kept += self.tokens[back]
        self.start, self.cut = back, end
        self.size = sum(self.tokens[back:end if upto is None else upto])

    def break_before(self, at: int, overlap: bool) -> None:
        """Close the chunk before row ``at``, or before the headings just above it."""
        if self.lead is not None and self.lead[0] > self.cut:
            self.flush(self.lead[0], overlap=False, upto=at)
            self.path = self.lead[1]
        else:
            self.flush(at, overlap=overlap)
            self.path = self.heading_path

    def make_room(self, weight: int) -> None:
        """An empty chunk drops its overlap when that and ``weight`` pass the limit."""
        if self.size + weight > self.sizes.limit and not self.body():
            self.start, self.size = self.cut, 0

    def drop_empty_headings(self, row: int) -> None:
        """Headings alone that pass the limit with row ``row``: their overlap goes,
        then their first headings (sections with no text of their own)."""
        while self.body() and self.only_headings(row) \
                and self.size + self.tokens[row] > self.sizes.limit:
            if self.start == self.cut:
                later = [h for h in self.headings if self.cut < h < row]
                if not later:
                    return
                self.cut = later[0]
                self.lead = (self.cut, self.headings[self.cut][0])
                self.path = self.lead[1]
            self.start = self.cut
            self.size = sum(self.tokens[self.start:row])

    def place(self, heading: tuple[str, ...] | None, first: int, end: int) -> None:
        """Pack the block of rows ``first``..``end`` (a heading when ``heading``)."""
        sizes, weight = self.sizes, sum(self.tokens[first:end])
        if heading is not None and self.has_text(first) and self.body() >= sizes.heading_break:
            self.break_before(first, overlap=False)
        elif self.has_text(first) and self.size + weight > sizes.target and (
                weight <= sizes.limit or self.body() >= sizes.heading_break):
            # A block too big for any chunk starts one of its own, unless the
            # chunk so far is too small to stand alone.
            self.break_before(first, overlap=heading is None)  # no overlap into a new section
        if weight <= sizes.limit:
            self.make_room(weight)
        if not self.body():
            self.path = heading if heading is not None else self.heading_path
        if heading is not None:
            self.heading_path = heading
        self.drop_empty_headings(first)
        if self.size + weight > sizes.limit:  # too big, with the headings above it: by lines
            self.by_lines(first, end)
        else:
            self.size += weight
        self.lead = (self.lead or (first, heading)) if heading is not None else None

    def by_lines(self, first: int, end: int) -> None:
        for row in range(first, end):
            if self.has_text(row) and self.size + self.tokens[row] > self.sizes.target:
                self.break_before(row, overlap=True)
            self.make_room(self.tokens[row])
            self.size += self.tokens[row]
            self.lead = None


def chunk_text(text: str, kind: str = "text", *, sizes: ChunkSizes = ChunkSizes(),
               pieces: WordPieces | None = None, first_line: int = 1,
               heads: _Headings | None = None) -> list[Chunk]:
    """The chunks of a document; ``kind`` is markdown, rst, code or text;
    ``pieces`` counts (default: the bundled embedder's). ``first_line`` and
    ``heads`` continue a document cut in sections (``iter_chunks``)."""
    heads = heads or _Headings()
    carried = heads.path
    rows, tokens = _rows(text, first_line, pieces or bundled_word_pieces(), sizes.target)
    blocks = _blocks(rows, kind, heads)
    bounds = [b.first for b in blocks] + [len(rows)]
    spans = list(zip(bounds, bounds[1:]))
    headings = {first: (block.heading, range(first, end))
                for block, (first, end) in zip(blocks, spans) if block.heading is not None}
    packer = _Packer(rows, tokens, sizes, headings, carried)
    for block, (first, end) in zip(blocks, spans):
        packer.place(block.heading, first, end)
    packer.flush(len(rows), overlap=False)
    return packer.chunks


SECTION_CHARS = 512 * 1024
"""A longer document is chunked a section of about this much at a time."""
_SEAM = re.compile(r"\n[ \t]*\n(?=\S)")
_FENCE_LINE = re.compile(r"^ {0,3}(```|~~~)", re.M)


def _section_end(text: str, at: int, kind: str) -> int:
    """Where the section from ``at`` ends: after a blank line near SECTION_CHARS
    on (outside a fenced block in Markdown), or the end of the text."""
    if len(text) - at <= SECTION_CHARS:
        return len(text)
    for seam in _SEAM.finditer(text, at + SECTION_CHARS):
        end = seam.end()
        if kind != "markdown" or len(_FENCE_LINE.findall(text, at, end)) % 2 == 0:
            return end
        if end - at > 4 * SECTION_CHARS:
            return end  # a fence that never closes: cut anyway
    return len(text)


def iter_chunks(text: str, kind: str = "text", *, sizes: ChunkSizes = ChunkSizes(),
                pieces: WordPieces | None = None) -> Iterator[Chunk]:
    """The chunks of a document of any size, a section at a time (memory and
    the time before the first chunk bounded by the section, not the text).
    Sections are cut at blank lines; the heading path carries across them, so
    only a chunk at a seam can end sooner than ``chunk_text`` would end it."""
    heads, at, line = _Headings(), 0, 1
    while at < len(text):
        end = _section_end(text, at, kind)
        section = text[at:end]
        yield from chunk_text(section, kind, sizes=sizes, pieces=pieces, first_line=line,
                              heads=heads)
        line += section.count("\n")
        at = end
