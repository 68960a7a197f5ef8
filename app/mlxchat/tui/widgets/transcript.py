"""The conversation: user, assistant, system and notice messages in a scroll
view. An assistant's reply and its streaming are in ``reply``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Literal

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from mlxchat.chat import ImageRef, Message, calls_text, split_attachments
from mlxchat.sources import Source, cite, without_sources
from mlxchat.tui.widgets.folded import (AttachmentBlock, SummaryBlock, SummaryMessage,
                                        ThinkingBlock, ToolResultBlock)
from mlxchat.tui.widgets.picture import image_view
from mlxchat.tui.widgets.reply import AssistantMessage, ReplyFormat, ReplyHandle, Verbatim
from mlxchat.tui.widgets.sources import SourcesPanel

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


class Place(Widget):
    """Where a message sent goes once it is committed: what is said meanwhile
    (a command typed after it) goes under it. Takes no room."""

    DEFAULT_CSS = "Place { display: none; }"


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


class NoticeMessage(Static):
    """A command result or an error: one short, plain text block."""

    def __init__(self, text: str | BaseException, level: NoticeLevel = "info") -> None:
        if isinstance(text, BaseException):
            # A user sees what went wrong, never a traceback.
            text = str(text) or type(text).__name__
        super().__init__(text, markup=False, classes=f"notice -{level}")
        self.level = level


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

    def hold_place(self) -> Place:
        """Keep the place of a message being sent (counted now: a notice said
        meanwhile is kept after it)."""
        place = Place()
        self._shown += 1
        self.mount(place)
        return place

    def give_up_place(self, place: Place | None) -> None:
        """The message was not sent after all."""
        if place is not None and place.is_attached:
            self._shown -= 1
            place.remove()

    async def add_user(self, text: str, *, pending: bool = False,
                       sources: list[Source] | None = None, forecast_s: float | None = None,
                       left_out: int = 0, budget: int | None = None,
                       images: tuple[ImageRef, ...] = (), place: Place | None = None,
                       ) -> UserMessage:
        """A sent message (``text`` as stored; with ``sources``, what it
        retrieved), at its ``place`` while that is still on screen."""
        if pending:
            widget: UserMessage = PendingMessage(text)
        else:
            self.last_sources = sources
            widget = UserMessage(text, sources=sources, forecast_s=forecast_s,
                                 left_out=left_out, budget=budget, images=images)
        if place is not None and place.is_attached:  # counted already
            await self.mount(widget, before=place)
            await place.remove()
        else:
            if not pending:
                self._shown += 1
            await self.mount(widget)
        self.anchor()  # sending a message brings the view back to the bottom
        return widget

    async def start_reply(self, label: str | None = None) -> ReplyHandle:
        widget = AssistantMessage(label=label or self.assistant_label)
        self._shown += 1
        await self.mount(widget)
        self.anchor()
        return ReplyHandle(widget, reply_format=self.reply_format(),
                           shown=partial(self.shown, sources=self.last_sources))

    def toggle_last_fold(self) -> bool:
        """Fold or unfold the last reasoning or tool result; False: there is none."""
        blocks = [b for b in self.query("ThinkingBlock, ToolResultBlock, SummaryBlock")
                  if isinstance(b, (ThinkingBlock, ToolResultBlock, SummaryBlock)) and b.text]
        if blocks:
            blocks[-1].toggle()
        return bool(blocks)

    async def add_results(self, messages: Iterable[Message], *,
                          before: Place | None = None) -> None:
        """Tool results the app's loop stored, or a compaction's summary (``before``
        the place of the message it made room for), folded."""
        widgets = [self._message_widget(m) for m in messages]
        self._shown += len(widgets)
        at = before if before is not None and before.is_attached else None
        await (self.mount_all(widgets, before=at) if at else self.mount_all(widgets))
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
