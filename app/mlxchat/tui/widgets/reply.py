"""An assistant's reply: its folded reasoning, the Markdown answer streamed in
through ``MarkdownStream`` (each batch appends a fragment instead of
re-rendering the whole message), and the footer that says how it ended."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from markdown_it import MarkdownIt
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Markdown, Static
from textual.widgets._markdown import MarkdownBlock, MarkdownParagraph

from mlxchat.tui.formatting import transcript_stats_line
from mlxchat.tui.widgets.folded import ThinkingBlock
from mlxchat.turn_stats import TurnStats


STOPPED = "(stopped)"
"""In front of the line under a reply you stopped (the Markdown export says "stopped")."""
FAILED = "(cut short by an error)"


class _OnePass:
    """Growing as text streams in, without a second layout pass: the pass that
    found the new size has laid out the widget and what it holds already, but
    Textual's default asks for another whole-screen pass, which doubled the
    cost of each streamed update (bench/tui.py)."""

    def _size_updated(self, size, virtual_size, container_size, layout: bool = True) -> bool:
        return super()._size_updated(size, virtual_size, container_size,  # type: ignore[misc]
                                     layout=False)


class GrowingParagraph(_OnePass, MarkdownParagraph):
    """A paragraph of a reply."""


def _shared_parser() -> MarkdownIt:
    """Textual's own parser ("gfm-like"), built once: Markdown builds a new one
    for every streamed update otherwise (~0.35 ms each here); parsing keeps
    no state in it."""
    global _PARSER
    if _PARSER is None:
        _PARSER = MarkdownIt("gfm-like")
    return _PARSER


_PARSER: MarkdownIt | None = None


class ReplyMarkdown(_OnePass, Markdown):
    """A reply's Markdown."""

    def __init__(self, markdown: str | None = None, **kwargs) -> None:
        super().__init__(markdown, parser_factory=_shared_parser, **kwargs)

    def get_block_class(self, block_name: str) -> type[MarkdownBlock]:
        if block_name == "paragraph_open":
            return GrowingParagraph
        return super().get_block_class(block_name)


class AssistantMessage(_OnePass, Vertical):
    """A reply: its folded reasoning, the Markdown answer, then a footer with
    '(stopped)' and the turn's stats."""

    def __init__(self, text: str = "", *, label: str = "assistant",
                 stats: TurnStats | None = None, cancelled: bool = False,
                 reasoning: str | None = None, shown: str | None = None) -> None:
        super().__init__(classes="message")
        self.text = text
        self.shown = text if shown is None else shown
        """The Markdown on screen: the text, its tool calls formatted."""
        self.label = label
        self.stats = stats
        self.cancelled = cancelled
        self.failed = False
        """An error cut it short (said live; stored, it reads as stopped)."""
        self.reasoning = reasoning or ""

    def compose(self) -> ComposeResult:
        yield Static(self.label, classes="message-label", markup=False)
        yield ThinkingBlock(self.reasoning, self.stats)
        yield ReplyMarkdown(self.shown, classes="message-body")
        yield Static(self._footer(), classes="message-footer")

    @property
    def markdown(self) -> Markdown:
        return self.query_one(Markdown)

    @property
    def thinking(self) -> ThinkingBlock:
        return self.query_one(ThinkingBlock)

    def set_footer(self, stats: TurnStats | None, cancelled: bool, *,
                   failed: bool = False) -> None:
        self.stats, self.cancelled, self.failed = stats, cancelled, failed
        thinking = self.thinking
        thinking.stats, thinking.live = stats, False
        thinking.show()
        footer = self.query_one(".message-footer", Static)
        footer.update(self._footer())
        footer.display = bool(stats or cancelled)

    def on_mount(self) -> None:
        self.query_one(".message-footer").display = bool(self.stats or self.cancelled)

    def _footer(self) -> Content:
        parts: list[tuple[str, str] | str] = []
        if self.cancelled:
            parts.append((FAILED if self.failed else STOPPED, "$warning italic"))
        if self.stats is not None:
            if parts:
                parts.append("  ")
            parts.append(transcript_stats_line(self.stats))
        return Content.assemble(*parts)


class ReplyFormat(Protocol):
    """A streaming reply's text -> the Markdown to append (``models.tools.CallStream``)."""

    def add(self, fragment: str) -> str: ...

    def finish(self) -> str: ...


class Verbatim:
    """Text shown as it comes."""

    def add(self, fragment: str) -> str:
        return fragment

    def finish(self) -> str:
        return ""


class ReplyHandle:
    """Streams one assistant reply: ``append`` fragments, then ``finish`` once.
    The answer's Markdown only grows: a tool call's markup is held back by the
    transcript's ``reply_format`` and appended as a block once complete."""

    def __init__(self, message: AssistantMessage, *, reply_format: ReplyFormat,
                 shown: Callable[[str], str]) -> None:
        self.message = message
        self.text = message.text
        self.finished = False
        self._stream = Markdown.get_stream(message.markdown)
        self._format = reply_format
        self._shown = shown
        """The whole text -> its Markdown (tool calls formatted, [n] naming the
        files the message it answers retrieved)."""

    async def append(self, fragment: str, part: str = "answer") -> None:
        if self.finished:
            raise RuntimeError("append() after finish()")
        if part == "reasoning":
            thinking = self.message.thinking
            thinking.text += fragment
            self.message.reasoning = thinking.text
            thinking.live = True
            thinking.show()
            return
        if self.message.thinking.live:
            self.message.thinking.live = False
            self.message.thinking.show()
        self.text += fragment
        await self._stream.write(self._format.add(fragment))

    async def finish(self, stats: TurnStats | None = None, *, cancelled: bool = False,
                     failed: bool = False) -> None:
        """End the stream; a cancelled reply keeps the text written so far (a
        call cut short as it was written); ``failed``: an error cut it short."""
        if self.finished:
            return
        self.finished = True
        await self._stream.write(self._format.finish())
        await self._stream.stop()
        self.message.text = self.text
        shown = self.message.shown = self._shown(self.text)
        if shown.strip("\n") != (self.message.markdown.source or "").strip("\n"):
            await self.message.markdown.update(shown)  # the stream told it otherwise
        self.message.set_footer(stats, cancelled or failed, failed=failed)
