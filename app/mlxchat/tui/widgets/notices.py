"""Command results that are more than a line: Markdown and tables.

They sit in the transcript like ``NoticeMessage`` (same border and colours).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
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


def result_table(caption: str, columns: Sequence[str],
                 rows: Sequence[Sequence[str]]) -> Table:
    """Cells are Text, so '[x]' in a title or a path is never read as markup."""
    show_header = any(columns)
    table = Table(box=box.SIMPLE_HEAD if show_header else None, show_header=show_header,
                  title=Text(caption, style="bold") if caption else None,
                  title_justify="left", pad_edge=False, expand=False,
                  header_style="bold", padding=(0, 2, 0, 0))
    for i, name in enumerate(columns):
        table.add_column(Text(name), style="bold" if i == 0 and not show_header else "",
                         overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


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
        super().__init__(result_table(caption, columns, rows), classes="notice -info")
        self.caption = caption
        self.columns = tuple(columns)
        self.rows = [tuple(r) for r in rows]
