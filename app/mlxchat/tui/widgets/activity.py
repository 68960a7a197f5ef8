"""One line over the prompt while something slow runs: a model loading
(stage and percent) or a command such as /model."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import ProgressBar, Static


class ActivityBar(Horizontal):
    """Hidden until ``show``; ``total=None`` shows an indeterminate bar.

    Hidden, the bar is left determinate: an indeterminate one animates at 15
    frames a second even where nothing shows it, waking the UI thread 15 times
    a second for as long as the app runs (and during every reply)."""

    DEFAULT_CSS = """
    ActivityBar { height: 1; display: none; padding: 0 2; }
    ActivityBar.-active { display: block; }
    ActivityBar > #activity-label { width: auto; max-width: 70%; color: $text-muted; }
    ActivityBar > ProgressBar { width: 1fr; margin-left: 2; }
    ActivityBar > ProgressBar > Bar { width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label = ""

    def compose(self) -> ComposeResult:
        yield Static("", id="activity-label", markup=False)
        yield ProgressBar(total=1, show_eta=False, id="activity-progress")

    def show(self, label: str, done: int | None = None, total: int | None = None) -> None:
        self.label = label
        self.query_one("#activity-label", Static).update(label)
        bar = self.query_one(ProgressBar)
        bar.update(total=total if total else None, progress=done or 0)
        bar.show_percentage = bool(total)
        self.add_class("-active")

    def hide(self) -> None:
        self.label = ""
        self.remove_class("-active")
        self.query_one(ProgressBar).update(total=1, progress=0)  # stops the animation

    @property
    def active(self) -> bool:
        return self.has_class("-active")
