"""Command results that are more than a line: Markdown and tables.

They sit in the transcript like ``NoticeMessage`` (same border and colours).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from textual.widgets import Markdown, Static


class MarkdownNotice(Markdown):
    """A command's Markdown answer (``/help NAME``)."""

    DEFAULT_CSS = """
    MarkdownNotice {
        height: auto;
        margin: 1 0 0 0;
        padding: 0 1;
        border-left: outer $accent;
        background: transparent;
    }
    MarkdownNotice > MarkdownParagraph { margin: 0; }
    """

    def __init__(self, text: str) -> None:
        super().__init__(text, classes="notice -info")


class ResultTable:
    """A command's table that adapts to the width it gets: a table when its
    natural width fits; else two columns wrap as a grid, and wider tables turn
    into one block per row ('column: value' lines). Cells are Text, so '[x]' in
    a title or a path is never read as markup."""

    def __init__(self, caption: str, columns: Sequence[str],
                 rows: Sequence[Sequence[str]]) -> None:
        self.caption = caption
        self.columns = list(columns)
        self.rows = [list(r) for r in rows]

    def _title(self) -> Text | None:
        return Text(self.caption, style="bold") if self.caption else None

    def table(self) -> Table:
        show_header = any(self.columns)
        table = Table(box=box.SIMPLE_HEAD if show_header else None, show_header=show_header,
                      title=self._title(), title_justify="left", pad_edge=False,
                      header_style="bold", padding=(0, 2, 0, 0))
        for i, name in enumerate(self.columns):
            table.add_column(Text(name), no_wrap=True,
                             style="bold" if i == 0 and not show_header else "")
        for row in self.rows:
            table.add_row(*(Text(cell) for cell in row))
        return table

    def grid(self) -> Table:
        grid = Table.grid(padding=(0, 2), expand=True)
        grid.title, grid.title_justify = self._title(), "left"
        grid.add_column(style="bold", no_wrap=True, max_width=30, overflow="ellipsis")
        grid.add_column(ratio=1, overflow="fold")
        if any(self.columns):
            grid.add_row(*(Text(c, style="bold underline") for c in self.columns))
        for row in self.rows:
            grid.add_row(*(Text(cell) for cell in row))
        return grid

    def records(self) -> Group:
        title = self._title()
        parts: list[Text] = [title] if title is not None else []
        for row in self.rows:
            block = Text()
            block.append(row[0] if row else "", style="bold")
            for name, cell in zip(self.columns[1:], row[1:]):
                if cell:
                    block.append("\n  ")
                    block.append(f"{name}: " if name else "", style="dim")
                    block.append(cell)
            parts.append(block)
        return Group(*parts)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = self.table()
        natural = Measurement.get(console, options.update_width(10_000), table).maximum
        if natural <= options.max_width:
            yield table
        elif len(self.columns) <= 2:
            yield self.grid()
        else:
            yield self.records()


class TableNotice(Static):
    """A command's table (``/stats``, ``/get``, ``/sessions SEARCH``)."""

    DEFAULT_CSS = """
    TableNotice {
        height: auto;
        margin: 1 0 0 0;
        padding: 0 1;
        border-left: outer $accent;
    }
    """

    def __init__(self, caption: str, columns: Sequence[str],
                 rows: Sequence[Sequence[str]]) -> None:
        super().__init__(ResultTable(caption, columns, rows), classes="notice -info")
        self.caption = caption
        self.columns = tuple(columns)
        self.rows = [tuple(r) for r in rows]
