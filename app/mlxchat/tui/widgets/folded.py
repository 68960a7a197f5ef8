"""What a message holds folded to one line until clicked: a reply's reasoning
(``ThinkingBlock``), a file attached to a message (``AttachmentBlock``), a
tool's result (``ToolResultBlock``) and a compaction's summary (``SummaryBlock``)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from mlxchat.chat import Message, human_bytes, quoted, tool_label
from mlxchat.turn_stats import TurnStats
from mlxchat.units import fmt_int, fmt_seconds, plural


class Folded(Static):
    """One line while folded, more when unfolded (a click, or ctrl+t on the
    last one): each block says what its ``show`` draws."""

    def __init__(self, classes: str) -> None:
        super().__init__(classes=classes, markup=False)
        self.expanded = False

    def show(self) -> None:
        raise NotImplementedError

    def on_mount(self) -> None:
        self.show()

    def toggle(self) -> None:
        self.expanded = not self.expanded
        self.show()

    def on_click(self) -> None:
        self.toggle()


class ThinkingBlock(Folded):
    """A reply's reasoning above its answer: one dimmed line while folded (its
    token count and time), the whole text when unfolded (a click, or ctrl+t
    for the last reply)."""

    def __init__(self, text: str = "", stats: TurnStats | None = None) -> None:
        super().__init__("thinking")
        self.text, self.stats = text, stats
        self.live = False
        """Reasoning is streaming into it now."""

    def header(self) -> str:
        mark = "▾" if self.expanded else "▸"
        figures = []
        if self.stats is not None and self.stats.reasoning_tokens:
            figures = [f"{fmt_int(self.stats.reasoning_tokens)} tokens",
                       fmt_seconds(self.stats.reasoning_s)]
        words = "Thinking…" if self.live else "Thought"
        return " · ".join([f"{mark} {words}", *figures])

    def show(self) -> None:
        self.display = bool(self.text or self.live)
        body = self.text if self.expanded else ""
        self.update(Content.assemble((self.header(), "italic"), ("\n" + body) if body else ""))


class AttachmentBlock(Folded):
    """A file attached to a message: one line while folded (its name, size and
    lines), the whole text when unfolded (a click)."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__("attachment")
        self.name_, self.text = name, text

    def header(self) -> str:
        mark = "▾" if self.expanded else "▸"
        size = len(self.text.encode("utf-8"))
        lines = self.text.count("\n") + 1
        return (f"{mark} attached {self.name_} · {human_bytes(size)} · "
                f"{plural(lines, 'line')}" + ("" if self.expanded else " · click to unfold"))

    def show(self) -> None:
        body = "\n" + self.text if self.expanded else ""
        self.update(Content.assemble((self.header(), "italic"), body))


class ToolResultBlock(Folded):
    """A tool's result: one dimmed line while folded (the server's tool, how
    long it took, how much it sent, a note: denied, an error, a cut), the
    result as it went to the model when unfolded (a click, or ctrl+t on the
    last one)."""

    def __init__(self, message: Message) -> None:
        super().__init__("tool-result")
        self.message = message

    @property
    def text(self) -> str:
        return self.message.content

    def header(self) -> str:
        mark = "▾" if self.expanded else "▸"
        run = self.message.tool_run
        if run is not None:
            return f"{mark} tool · {run.header()}"
        size = human_bytes(len(self.message.content.encode("utf-8", "replace")))
        return f"{mark} {tool_label(self.message)} · {size}"

    def show(self) -> None:
        body = "\n" + quoted(self.message.content) if self.expanded else ""
        self.update(Content.assemble((self.header(), "italic"), body))


class SummaryBlock(Folded):
    """A compaction: one line while folded ('42 messages summarized in 380
    tokens'), the summary the model sees in their place when unfolded (a
    click, or ctrl+t on the last one). The messages above it stay shown."""

    def __init__(self, message: Message) -> None:
        super().__init__("summary")
        self.message = message

    @property
    def text(self) -> str:
        return self.message.content

    def header(self) -> str:
        mark = "▾" if self.expanded else "▸"
        record = self.message.compaction
        if record is None:
            return f"{mark} summary of the earlier conversation"
        return (f"{mark} {record.headline()} · {fmt_int(record.tokens_before)} → "
                f"{fmt_int(record.tokens_after)} tokens in the window"
                + ("" if self.expanded else " · click to unfold"))

    def show(self) -> None:
        record = self.message.compaction
        how = {"manual": "by /compact", "api": "for an API client"}.get(
            record.trigger if record else "", "when the window filled")
        body = (f"\nCompacted {how}: the model sees this summary in place of the messages "
                f"above (they stay here; /compact undo brings them back).\n"
                + quoted(self.message.content)) if self.expanded else ""
        self.update(Content.assemble((self.header(), "italic"), body))


class SummaryMessage(Vertical):
    """A compaction's summary, folded, where the conversation was compacted."""

    def __init__(self, message: Message) -> None:
        super().__init__(classes="message summary-message")
        self.message = message

    def compose(self) -> ComposeResult:
        yield SummaryBlock(self.message)
