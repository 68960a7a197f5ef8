"""Commands and keys, in two wrapped two-column lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def rows_table(rows: Sequence[tuple[str, str]]) -> Table:
    """A borderless grid; the right column wraps instead of scrolling sideways.
    Cells are Text: a plain str would have '[name]' in a usage line read as markup."""
    table = Table.grid(padding=(0, 2), expand=True)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(ratio=1)
    for left, right in rows:
        table.add_row(Text(left), Text(right))
    return table


class HelpScreen(ModalScreen[None]):
    """``commands``: (usage, help) rows; ``keys``: (key, what it does) rows."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,f1", "close", "Close", show=False)]

    def __init__(self, commands: Sequence[tuple[str, str]],
                 keys: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(classes="dialog-screen")
        self.commands = list(commands)
        self.keys = list(keys)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="help-dialog") as dialog:
            dialog.border_title = "Help"
            dialog.border_subtitle = "esc closes"
            with VerticalScroll(id="help-body"):
                yield Static("Commands", classes="dialog-heading")
                yield Static(rows_table(self.commands), id="help-commands")
                if self.keys:
                    yield Static("Keys", classes="dialog-heading")
                    yield Static(rows_table(self.keys), id="help-keys")

    def on_mount(self) -> None:
        self.query_one("#help-body").focus()  # arrows and page keys scroll

    def action_close(self) -> None:
        self.dismiss(None)
