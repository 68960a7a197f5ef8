"""Commands by topic and keys, in wrapped two-column lists that fit 80 columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

Rows = Sequence[tuple[str, str]]
LEFT_SHARE = 0.4
"""The left column (a usage line, a key) takes at most this share of the width."""
USAGE_WIDTH = 30
"""Usage lines longer than this (/docs, /tools) wrap rather than widen the column."""
HINT = "/help NAME explains one command · // at the start of a message sends a literal /"


class RowsTable:
    """Borderless two-column rows sized to the width they get: the left column
    as wide as its longest entry up to ``LEFT_SHARE``; a longer entry takes a
    line of its own with its meaning under it in the right column. Everything
    wraps at spaces, nothing is cut. Cells are Text: '[name]' is not markup."""

    def __init__(self, rows: Rows, *, longest: int | None = None) -> None:
        self.rows = list(rows)
        self.longest = longest if longest is not None else max(
            (len(left) for left, _ in self.rows), default=0)
        """The left column's natural width (shared by tables one under another)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        left = min(self.longest, max(8, int(options.max_width * LEFT_SHARE)))
        grid = _grid(left)
        for usage, meaning in self.rows:
            if len(usage) <= left:
                grid.add_row(Text(usage), Text(meaning))
                continue
            if grid.row_count:
                yield grid
            yield Text(usage, style="bold", overflow="fold")
            grid = _grid(left)
            grid.add_row(Text(""), Text(meaning))
        if grid.row_count:
            yield grid


def _grid(left: int) -> Table:
    grid = Table.grid(padding=(0, 2), expand=True)
    grid.add_column(style="bold", width=left, overflow="fold")
    grid.add_column(ratio=1, overflow="fold")
    return grid


def rows_table(rows: Rows, *, longest: int | None = None) -> RowsTable:
    return RowsTable(rows, longest=longest)


class HelpScreen(ModalScreen[None]):
    """``sections``: (heading, (usage, meaning) rows) per topic; ``keys``:
    (key, what it does) rows."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,f1", "close", "Close", show=False)]

    def __init__(self, sections: Sequence[tuple[str, Rows]],
                 keys: Rows = ()) -> None:
        super().__init__(classes="dialog-screen")
        self.sections = [(title, list(rows)) for title, rows in sections]
        self.commands = [row for _, rows in self.sections for row in rows]
        self.keys = list(keys)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="help-dialog") as dialog:
            dialog.border_title = "Help"
            dialog.border_subtitle = "esc closes"
            with VerticalScroll(id="help-body"):
                yield Static(HINT, classes="dialog-hint", id="help-hint")
                longest = max((len(usage) for usage, _ in self.commands
                               if len(usage) <= USAGE_WIDTH), default=USAGE_WIDTH)
                for i, (title, rows) in enumerate(self.sections):
                    yield Static(title, classes="dialog-heading")
                    yield Static(rows_table(rows, longest=longest), classes="help-commands",
                                 id="help-commands" if i == 0 else None)
                if self.keys:
                    yield Static("Keys", classes="dialog-heading")
                    yield Static(rows_table(self.keys), id="help-keys")

    def on_mount(self) -> None:
        self.query_one("#help-body").focus()  # arrows and page keys scroll

    def action_close(self) -> None:
        self.dismiss(None)
