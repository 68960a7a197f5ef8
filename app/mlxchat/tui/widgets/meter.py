"""A one-line horizontal bar whose colour follows a level class."""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from mlxchat.tui.formatting import Level

_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar_cells(fraction: float, width: int) -> tuple[str, str]:
    """(filled, empty) strings for a bar of ``width`` cells, in eighths of a cell."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_EIGHTHS[part] if part else "")
    return filled, " " * (width - len(filled))


class Meter(Widget):
    """``fraction`` of the width filled; the ``-warning``/``-error`` classes recolour it.
    The first ``pinned`` of it (pinned documents) is drawn in its own colour; a
    ``mark`` (a threshold: where a compaction is prepared) as a tick on the track."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"meter--empty", "meter--pinned", "meter--mark"}
    DEFAULT_CSS = """
    Meter {
        height: 1;
        width: 1fr;
        min-width: 4;
        color: $success;
    }
    Meter.-warning { color: $warning; }
    Meter.-error { color: $error; }
    Meter > .meter--empty { background: $foreground 12%; }
    Meter > .meter--pinned { color: $accent; }
    Meter > .meter--mark { color: $warning; }
    """

    fraction: reactive[float] = reactive(0.0)
    pinned: reactive[float] = reactive(0.0)
    mark: reactive[float] = reactive(0.0)

    def set_value(self, fraction: float, level: Level = "ok", pinned: float = 0.0,
                  mark: float = 0.0) -> None:
        self.fraction = fraction
        self.pinned = min(pinned, fraction)
        self.mark = mark
        self.set_class(level == "warning", "-warning")
        self.set_class(level == "error", "-error")

    @property
    def level(self) -> Level:
        if self.has_class("-error"):
            return "error"
        return "warning" if self.has_class("-warning") else "ok"

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y != 0 or width <= 0:
            return Strip.blank(width, self.rich_style)
        filled, empty = bar_cells(self.fraction, width)
        base = self.rich_style
        empty_style = base + self.get_component_rich_style("meter--empty")
        # The partial eighth block is drawn on the empty track's background.
        on_track = Style(bgcolor=empty_style.bgcolor)
        cut = min(round(self.pinned * width), len(filled))
        pinned_style = base + self.get_component_rich_style("meter--pinned") + on_track
        segments = [Segment(filled[:cut], pinned_style), Segment(filled[cut:], base + on_track),
                    Segment(empty, empty_style)]
        tick = round(self.mark * width) - len(filled)
        if self.mark and 0 <= tick < len(empty):  # on the empty track: past it, the bar says it
            mark_style = empty_style + self.get_component_rich_style("meter--mark")
            segments[2:] = [Segment(empty[:tick], empty_style), Segment("│", mark_style),
                            Segment(empty[tick + 1:], empty_style)]
        return Strip([s for s in segments if s.text], width)
