"""A tool's result in the transcript, folded: one dimmed line (the server's
tool, how long it took, how much it sent, and a note: denied, an error, a
cut), the result itself once unfolded (a click, or ctrl+t on the last one)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from mlxchat.chat import Message, human_bytes, quoted, tool_label


class ToolResultBlock(Static):
    """The folding line and, unfolded, the result as it went to the model."""

    def __init__(self, message: Message) -> None:
        super().__init__(classes="tool-result", markup=False)
        self.message = message
        self.expanded = False

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

    def on_mount(self) -> None:
        self.show()

    def show(self) -> None:
        body = "\n" + quoted(self.message.content) if self.expanded else ""
        self.update(Content.assemble((self.header(), "italic"), body))

    def toggle(self) -> None:
        self.expanded = not self.expanded
        self.show()

    def on_click(self) -> None:
        self.toggle()


class ToolResultMessage(Vertical):
    """One tool result (from the app's tool loop or an API client's)."""

    def __init__(self, message: Message) -> None:
        super().__init__(classes="message tool-message")
        self.message = message

    def compose(self) -> ComposeResult:
        yield ToolResultBlock(self.message)

    @property
    def block(self) -> ToolResultBlock:
        return self.query_one(ToolResultBlock)
