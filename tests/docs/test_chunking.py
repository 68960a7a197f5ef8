"""Chunks fall on paragraph, heading and code-block boundaries, stay within
their size, overlap a little when cut for size, and keep lines and headings."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mlxchat.docs import ChunkSizes, chunk_text
from mlxchat.docs.chunking import LONG_LINE
from mlxchat.docs.word_pieces import bundled_word_pieces


def count_tokens(text: str) -> int:
    return bundled_word_pieces().count([text])[0]

SMALL = ChunkSizes(target=60, limit=80, overlap=12, heading_break=10)


def _lines(text: str, chunk) -> str:
    return "\n".join(text.split("\n")[chunk.start_line - 1:chunk.end_line])


def test_markdown_cuts_at_headings_and_keeps_the_heading_path():
    text = ("# Guide\n\nIntro to the guide, a few words here to pass the break.\n\n"
            "## Install\n\nRun the installer and wait for it to finish.\n\n"
            "## Use\n\nType a question.\n")
    chunks = chunk_text(text, "markdown", sizes=SMALL)
    assert [(c.start_line, c.end_line, c.heading) for c in chunks] == [
        (1, 3, ("Guide",)), (5, 7, ("Guide", "Install")), (9, 11, ("Guide", "Use"))]
    for c in chunks:  # a chunk's text is exactly its lines
        assert c.text == _lines(text, c)


def test_a_long_section_is_cut_on_lines_with_a_small_overlap_and_within_the_limit():
    body = "\n".join(f"line {i} alpha beta gamma delta." for i in range(60))
    text = "# Long\n\n" + body + "\n"
    chunks = chunk_text(text, "markdown", sizes=SMALL)
    assert len(chunks) > 3
    assert all(c.tokens <= SMALL.limit for c in chunks)
    for before, after in zip(chunks, chunks[1:]):
        overlap = before.end_line - after.start_line + 1
        assert 1 <= overlap and count_tokens(_lines(text, after).split("\n")[0]) * overlap \
            <= SMALL.overlap
        assert after.heading == ("Long",)
        assert after.text == _lines(text, after)
    assert chunks[-1].end_line == 62 and chunks[0].start_line == 1


def test_a_fenced_code_block_is_never_split_at_its_blank_lines():
    code = "```python\ndef f():\n\n    return 1\n\n\nprint(f())\n```"
    text = "Some words before the code block here.\n\n" + code + "\n\nAfter.\n"
    chunks = chunk_text(text, "markdown", sizes=ChunkSizes(target=14, limit=20, overlap=0))
    holding = [c for c in chunks if "def f()" in c.text]
    assert len(holding) == 1 and "print(f())" in holding[0].text
    assert holding[0].start_line == 3 and holding[0].end_line == 10


def test_rst_and_code_headings():
    rst = "Title\n=====\n\nSome body text for the title.\n\nPart\n----\n\nMore text.\n"
    chunks = chunk_text(rst, "rst", sizes=ChunkSizes(heading_break=1))
    assert [(c.start_line, c.end_line, c.heading) for c in chunks] == [
        (1, 4, ("Title",)), (6, 9, ("Title", "Part"))]
    code = ("import os\n\n\nclass Loader:\n    x = 1\n\n    def load(self):\n"
            "        return os.sep\n")
    chunks = chunk_text(code, "code", sizes=ChunkSizes(heading_break=1))
    assert [(c.start_line, c.end_line, c.heading) for c in chunks] == [
        (1, 1, ()), (4, 5, ("Loader",)), (7, 8, ("Loader", "load"))]


def test_a_huge_single_line_is_cut_and_keeps_its_line_number():
    line = "alpha beta, " * (LONG_LINE // 4)  # 6,000 characters, 1,500 word pieces
    text = "first\n" + line + "\nlast\n"
    sizes = ChunkSizes(target=30, limit=40, overlap=0)
    chunks = chunk_text(text, "text", sizes=sizes)
    assert {c.start_line for c in chunks if "alpha" in c.text} == {2}
    assert sum(c.text.count("alpha") for c in chunks) == LONG_LINE // 4
    assert all(c.tokens <= sizes.limit for c in chunks)
    assert chunks[-1].text.endswith("\nlast") and chunks[-1].end_line == 3
    assert chunks[0].text == "first" and chunks[0].end_line == 1
    # One word longer than LONG_LINE is cut by characters (the embedder reads
    # it as one unknown piece).
    word = "x" * (LONG_LINE * 3 + 5)
    chunks = chunk_text(f"first\n{word}\nlast\n", "text", sizes=sizes)
    assert sum(c.text.count("x") for c in chunks) == len(word)
    assert {c.end_line for c in chunks} == {3}


def test_empty_and_blank_text_give_no_chunks():
    assert chunk_text("", "text") == []
    assert chunk_text("\n\n  \n", "markdown") == []


def _is_heading(line: str) -> bool:
    return line.lstrip().startswith("#")


def _check_headings_travel(text: str, sizes: ChunkSizes) -> list:
    chunks = chunk_text(text, "markdown", sizes=sizes)
    for n, chunk in enumerate(chunks):
        lines = [line for line in chunk.text.split("\n") if line.strip()]
        assert not all(_is_heading(line) for line in lines), chunk  # never a heading alone
        if n < len(chunks) - 1:  # nor one cut off from the text under it
            assert not _is_heading(lines[-1]), chunk
    return chunks


def test_a_heading_travels_with_the_text_under_it():
    # A section too long for one chunk, then a heading and a paragraph that
    # fills a chunk: the heading went out alone (models.md's "## Ollama and
    # LM Studio", ranked first for a question its paragraph answers).
    long = "\n".join(f"line {i} alpha beta gamma delta." for i in range(20))
    para = " ".join(["heron"] * 50)
    text = f"# Guide\n\n{long}\n\n## Ollama and LM Studio\n\n{para}\n\n## Next\n\nA word.\n"
    chunks = _check_headings_travel(text, SMALL)
    holding = [c for c in chunks if "## Ollama" in c.text]
    assert len(holding) == 1 and "heron" in holding[0].text
    assert holding[0].heading == ("Guide", "Ollama and LM Studio")
    assert holding[0].start_line == text.split("\n").index("## Ollama and LM Studio") + 1
    assert all(c.text == _lines(text, c) for c in chunks)
    # Headings one above another go together, into the chunk of their text.
    text = f"# Guide\n\n{long}\n\n## Part\n\n### Piece\n\n{para}\n"
    chunks = _check_headings_travel(text, SMALL)
    assert any("## Part\n\n### Piece\n\nheron" in c.text for c in chunks)
    # A document of headings alone is still one chunk; a last heading with
    # nothing under it is no chunk of its own.
    assert [c.text for c in chunk_text("# A\n\n## B\n", "markdown")] == ["# A\n\n## B"]
    tail = chunk_text(f"{long}\n\n## Empty\n", "markdown", sizes=SMALL)
    assert all(c.text.strip() != "## Empty" for c in tail)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 30), st.integers(0, 3)),
                min_size=1, max_size=12))
def test_no_chunk_is_a_heading_alone_whatever_the_sections(sections):
    parts = []
    for n, (level, words, paragraphs) in enumerate(sections):
        parts.append(f"{'#' * level} Section {n}")
        parts += [" ".join(f"w{n}x{i}" for i in range(words)) or "x"] * paragraphs
    text = "\n\n".join(parts) + "\n"
    chunks = _check_headings_travel(text, SMALL) if any(p for _, _, p in sections) else []
    assert all(c.tokens <= SMALL.limit for c in chunks)


def test_a_paragraph_too_big_for_one_chunk_starts_a_chunk_of_its_own():
    # server.md's second paragraph ("`mlxchat serve` loads the model ... It binds
    # 127.0.0.1:8000 by default") was cut after its first four lines into the
    # intro's chunk, and its address went with an unrelated tail.
    intro = " ".join(["words of the introduction"] * 6)  # room left for two lines
    big = "\n".join(f"line {i} of the long paragraph about the server and its address."
                    for i in range(14))
    text = f"# Server\n\n{intro}\n\n{big}\n"
    chunks = chunk_text(text, "markdown", sizes=SMALL)
    first = text.split("\n").index(big.split("\n")[0]) + 1
    assert chunks[0].end_line < first and "line 0 " not in chunks[0].text
    holding = next(c for c in chunks if "line 0 " in c.text)
    assert "line 1 " in holding.text and "line 2 " in holding.text
    assert all(c.tokens <= SMALL.limit for c in chunks)
