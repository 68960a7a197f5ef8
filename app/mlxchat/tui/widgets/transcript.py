"""The conversation: user, assistant, system and notice messages in a scroll view.

Assistant replies stream into a Markdown widget through ``MarkdownStream``, so
each token appends a fragment instead of re-rendering the whole message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Literal, Protocol

from markdown_it import MarkdownIt
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Markdown, Static
from textual.widgets._markdown import MarkdownBlock, MarkdownParagraph

from mlxchat.chat import ImageRef, Message, calls_text, split_attachments
from mlxchat.sources import Source, cite, without_sources
from mlxchat.tui.formatting import transcript_stats_line
from mlxchat.tui.widgets.folded import (AttachmentBlock, SummaryBlock, SummaryMessage,
                                        ThinkingBlock, ToolResultBlock)
from mlxchat.tui.widgets.sources import SourcesPanel
from mlxchat.tui.widgets.picture import image_view
from mlxchat.turn_stats import TurnStats

NoticeLevel = Literal["info", "warning", "error"]


class PlainMessage(Vertical):
    """A label and a text shown verbatim (no markup, no Markdown)."""

    LABEL = ""

    def __init__(self, text: str) -> None:
        super().__init__(classes="message")
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(self.LABEL, classes="message-label", markup=False)
        yield Static(self.text, classes="message-body", markup=False)


class UserMessage(PlainMessage):
    """What the user typed (files attached in front of it folded); with the
    sources retrieved for it underneath."""

    LABEL = "you"

    def __init__(self, text: str, *, sources: list[Source] | None = None,
                 forecast_s: float | None = None, left_out: int = 0,
                 budget: int | None = None, images: tuple[ImageRef, ...] = ()) -> None:
        super().__init__(without_sources(text) if sources else text)
        self.images = images
        self.files, self.typed = split_attachments(self.text)
        self.sources = sources
        self._panel = (SourcesPanel(sources, forecast_s=forecast_s, left_out=left_out,
                                    budget=budget) if sources else None)

    def compose(self) -> ComposeResult:
        yield Static(self.LABEL, classes="message-label", markup=False)
        yield from (image_view(ref, self.app) for ref in self.images)
        for name, text in self.files:
            yield AttachmentBlock(name, text)
        if self.typed.strip() or not self.files:
            yield Static(self.typed.strip("\n") if self.files else self.text,
                         classes="message-body", markup=False)
        if self._panel is not None:
            yield self._panel


class PendingMessage(UserMessage):
    """A message waiting for the model to load; sent once it is ready."""

    LABEL = "you · waiting for the model to load · escape withdraws it"


class SystemMessage(PlainMessage):
    LABEL = "system prompt"


class ToolResultMessage(Vertical):
    """A tool's result (from the app's tool loop or an API client's), folded."""

    def __init__(self, message: Message) -> None:
        super().__init__(classes="message tool-message")
        self.message = message

    def compose(self) -> ComposeResult:
        yield ToolResultBlock(self.message)

    @property
    def block(self) -> ToolResultBlock:
        return self.query_one(ToolResultBlock)


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

    def set_footer(self, stats: TurnStats | None, cancelled: bool) -> None:
        self.stats, self.cancelled = stats, cancelled
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
            parts.append(("(stopped)", "$warning italic"))
        if self.stats is not None:
            if parts:
                parts.append("  ")
            parts.append(transcript_stats_line(self.stats))
        return Content.assemble(*parts)


class NoticeMessage(Static):
    """A command result or an error: one short, plain text block."""

    def __init__(self, text: str | BaseException, level: NoticeLevel = "info") -> None:
        if isinstance(text, BaseException):
            # A user sees what went wrong, never a traceback.
            text = str(text) or type(text).__name__
        super().__init__(text, markup=False, classes=f"notice -{level}")
        self.level = level


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

    def __init__(self, transcript: Transcript, message: AssistantMessage) -> None:
        self.transcript = transcript
        self.message = message
        self.text = message.text
        self.finished = False
        self._stream = Markdown.get_stream(message.markdown)
        self._format = transcript.reply_format()
        self.sources = transcript.last_sources
        """What the message it answers retrieved: its [n] name their files once done."""

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

    async def finish(self, stats: TurnStats | None = None, *, cancelled: bool = False) -> None:
        """End the stream; a cancelled reply keeps the text written so far (a
        call cut short as it was written)."""
        if self.finished:
            return
        self.finished = True
        await self._stream.write(self._format.finish())
        await self._stream.stop()
        self.message.text = self.text
        shown = self.message.shown = self.transcript.shown(self.text, self.sources)
        if shown.strip("\n") != (self.message.markdown.source or "").strip("\n"):
            await self.message.markdown.update(shown)  # the stream told it otherwise
        self.message.set_footer(stats, cancelled)


class Transcript(VerticalScroll):
    """The current branch of a conversation. Stays scrolled to the bottom while
    replies stream, until the user scrolls up (Textual's anchor)."""

    def __init__(self, *, assistant_label: str = "assistant", id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.assistant_label = assistant_label
        """Label over assistant replies; the app sets it to the model's name."""
        self.formatter: Callable[[str], str] = lambda text: text
        """A reply's text -> the Markdown shown (the app formats tool calls)."""
        self.reply_format: Callable[[], ReplyFormat] = Verbatim
        """A new ``ReplyFormat`` for each streaming reply (the app's formats tool calls)."""
        self.last_sources: list[Source] | None = None
        """The sources of the last user message shown: the next reply cites them."""
        self._session_id: int | None = None
        self._shown = 0
        """Messages shown (a notice is kept at this place)."""
        self._kept: list[tuple[int, Callable[[], Widget]]] = []
        """The open session's notices, each where it came and how to show it again:
        a reload of the same session (a command that changed it) keeps them."""

    def on_mount(self) -> None:
        self.anchor()

    def shown(self, text: str, sources: list[Source] | None) -> str:
        """A reply's Markdown: tool calls formatted, [n] naming their source's file:line."""
        return cite(self.formatter(text), sources)

    def _message_widget(self, message: Message) -> Vertical:
        if message.role == "user":
            self.last_sources = message.sources
            return UserMessage(message.content, sources=message.sources, images=message.images)
        if message.role == "system":
            return SystemMessage(message.content)
        if message.role == "tool":
            return ToolResultMessage(message)
        if message.role == "summary":
            return SummaryMessage(message)
        content = message.content
        if message.tool_calls:  # stored apart from the text: shown after it
            content = "\n\n".join(filter(None, [content.rstrip(),
                                                 calls_text(message.tool_calls)]))
        label = message.stats.model if message.stats and message.stats.model else None
        return AssistantMessage(content, label=label or self.assistant_label,
                                stats=message.stats, cancelled=message.cancelled,
                                reasoning=message.reasoning,
                                shown=self.shown(content, self.last_sources))

    async def load(self, messages: Iterable[Message], *, session_id: int | None = None) -> None:
        """Replace everything with ``messages`` (root first); the notices shown
        in the same session stay where they were, but those said after messages
        that left the branch (a /retry, an /edit, an /undo) go with them: kept,
        they would sit between the branch's last message and its new reply."""
        messages = list(messages)
        if session_id != self._session_id:
            self._session_id, self._kept = session_id, []
        elif len(messages) < self._shown:  # those before the first message stay
            self._kept = [k for k in self._kept if k[0] < len(messages) or not k[0]]
        await self.clear()
        self.last_sources = None
        shown = [self._message_widget(m) for m in messages]
        self._shown = len(shown)
        widgets: list[Widget] = []
        kept = iter(self._kept)
        pending = next(kept, None)
        for i, widget in enumerate([*shown, None]):
            while pending is not None and (pending[0] <= i or widget is None):
                widgets.append(pending[1]())
                pending = next(kept, None)
            if widget is not None:
                widgets.append(widget)
        await self.mount_all(widgets)
        self.anchor()

    async def clear(self) -> None:
        await self.remove_children()

    async def add_user(self, text: str, *, pending: bool = False,
                       sources: list[Source] | None = None, forecast_s: float | None = None,
                       left_out: int = 0, budget: int | None = None,
                       images: tuple[ImageRef, ...] = ()) -> UserMessage:
        """A sent message (``text`` as stored; with ``sources``, what it retrieved)."""
        if pending:
            widget: UserMessage = PendingMessage(text)
        else:
            self.last_sources = sources
            self._shown += 1
            widget = UserMessage(text, sources=sources, forecast_s=forecast_s,
                                 left_out=left_out, budget=budget, images=images)
        await self.mount(widget)
        self.anchor()  # sending a message brings the view back to the bottom
        return widget

    async def start_reply(self, label: str | None = None) -> ReplyHandle:
        widget = AssistantMessage(label=label or self.assistant_label)
        self._shown += 1
        await self.mount(widget)
        self.anchor()
        return ReplyHandle(self, widget)

    def toggle_last_fold(self) -> bool:
        """Fold or unfold the last reasoning or tool result; False: there is none."""
        blocks = [b for b in self.query("ThinkingBlock, ToolResultBlock, SummaryBlock")
                  if isinstance(b, (ThinkingBlock, ToolResultBlock, SummaryBlock)) and b.text]
        if blocks:
            blocks[-1].toggle()
        return bool(blocks)

    async def add_results(self, messages: Iterable[Message]) -> None:
        """Tool results the app's loop stored, or a compaction's summary, folded."""
        widgets = [self._message_widget(m) for m in messages]
        self._shown += len(widgets)
        await self.mount_all(widgets)
        self.anchor()

    async def add_notice(self, text: str | BaseException,
                         level: NoticeLevel = "info") -> NoticeMessage:
        widget = await self.add_kept(partial(NoticeMessage, text, level))
        assert isinstance(widget, NoticeMessage)
        return widget

    async def add_kept(self, make: Callable[[], Widget]) -> Widget:
        """Show ``make()`` (a notice, a command's table) and keep it for reloads."""
        self._kept.append((self._shown, make))
        widget = make()
        await self.mount(widget)
        self.anchor()
        return widget
