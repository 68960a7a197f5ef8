"""Keys that scroll the transcript while the input keeps the focus: PageUp and
PageDown (with shift too), ctrl+up and ctrl+down a few lines, ctrl+home and
ctrl+end to the top and the bottom, and home and end as well while the input
is empty (in text they move the cursor, as they always did). The bottom
follows a streaming reply again; anywhere above it, the view stays put."""

from __future__ import annotations

from textual.binding import Binding
from textual.widget import Widget

LINES = 3
"""What ctrl+up and ctrl+down scroll by."""

SCROLL_BINDINGS = [
    Binding("pageup,shift+pageup", "scroll_transcript('page_up')", "Scroll up",
            show=False, priority=True),
    Binding("pagedown,shift+pagedown", "scroll_transcript('page_down')", "Scroll down",
            show=False, priority=True),
    Binding("ctrl+up", "scroll_transcript('up')", "Scroll up", show=False, priority=True),
    Binding("ctrl+down", "scroll_transcript('down')", "Scroll down", show=False,
            priority=True),
    Binding("ctrl+home", "scroll_transcript('top')", "Top", show=False, priority=True),
    Binding("ctrl+end", "scroll_transcript('bottom')", "Bottom", show=False, priority=True),
    Binding("home", "scroll_transcript('top', 'empty')", "Top", show=False, priority=True),
    Binding("end", "scroll_transcript('bottom', 'empty')", "Bottom", show=False,
            priority=True),
]
"""Priority: the input's own page keys would take them first."""


def applies(parameters: tuple[object, ...], input_text: str) -> bool:
    """home and end scroll only while the input is empty."""
    return "empty" not in parameters or not input_text


def scroll(transcript: Widget, where: str) -> None:
    if where == "page_up":
        transcript.scroll_page_up(animate=False)
    elif where == "page_down":
        transcript.scroll_page_down(animate=False)
    elif where in ("up", "down"):
        transcript.scroll_relative(y=-LINES if where == "up" else LINES, animate=False)
    elif where == "top":
        transcript.scroll_home(animate=False)
    else:
        transcript.anchor()  # back to the bottom, following what streams in
