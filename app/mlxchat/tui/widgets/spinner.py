"""A line that says what something waits for, with a turning mark in front."""

from __future__ import annotations

from collections.abc import Callable

from textual.timer import Timer
from textual.widget import Widget

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
FRAME_SECONDS = 0.1


class Spinner:
    """Draws ``'⠋ what'`` through ``draw`` and turns the mark on a timer of
    ``owner``'s, only while it runs: an idle app is never woken for it."""

    def __init__(self, owner: Widget, draw: Callable[[str], None]) -> None:
        self._owner, self._draw = owner, draw
        self._timer: Timer | None = None
        self._frame = 0
        self.label: str | None = None
        """What it waits for, while it spins; None when stopped."""

    def start(self, label: str) -> None:
        self.label = label
        if self._timer is None:
            self._timer = self._owner.set_interval(FRAME_SECONDS, self._turn)
        self._show()

    def stop(self) -> None:
        self.label = None
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def _turn(self) -> None:
        self._frame = (self._frame + 1) % len(FRAMES)
        self._show()

    def _show(self) -> None:
        if self.label is not None:
            self._draw(f"{FRAMES[self._frame]} {self.label}")
