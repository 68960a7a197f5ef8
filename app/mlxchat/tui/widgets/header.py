"""The header line: 'session title — model', the title cut first so the model
name stays whole however narrow the line is."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Header
from textual.widgets._header import HeaderTitle

MIN_TITLE = 12
"""The title is cut no shorter than this to keep the model name whole."""


def fit_title(title: str, sub_title: str, room: int) -> str:
    """``title`` cut with '…' so 'title — sub_title' fits ``room`` cells."""
    keep = room - len(sub_title) - len(" — ")
    if sub_title and room and len(title) > keep >= MIN_TITLE:
        return title[:keep - 1].rstrip() + "…"
    return title


class TitleHeader(Header):
    def format_title(self) -> Content:
        try:
            room = self.query_one(HeaderTitle).content_region.width
        except Exception:  # noqa: BLE001 - not composed yet: no room known
            room = 0
        title, sub_title = self.screen_title, self.screen_sub_title
        return self.app.format_title(fit_title(title, sub_title, room), sub_title)

    def on_resize(self) -> None:
        self.call_after_refresh(self._redraw)

    def _redraw(self) -> None:
        self.query_one(HeaderTitle).update(self.format_title())
