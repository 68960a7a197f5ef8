"""What a message retrieved, under the message: each chunk's file:lines,
heading, relevance against the best and tokens, and what they cost (with the forecast prefill time
when the message was just sent)."""

from __future__ import annotations

import os

from textual.content import Content
from textual.widgets import Static

from mlxchat.sources import Source, best_score, left_out_words, sources_summary
from mlxchat.units import fmt_seconds


def shown_path(path: str) -> str:
    """A path as a reader knows it: under the home folder as '~/…'."""
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if home not in ("", "/") and path.startswith(home + os.sep) \
        else path


class SourcesPanel(Static):
    """The sources of one user message (``forecast_s``: seconds its block was
    forecast to take to prefill, shown only before the reply came; ``left_out``
    matches did not fit the ``budget`` tokens)."""

    def __init__(self, sources: list[Source], *, forecast_s: float | None = None,
                 left_out: int = 0, budget: int | None = None) -> None:
        super().__init__(classes="sources", markup=False)
        self.sources = sources
        self.forecast_s = forecast_s
        self.left_out = left_out
        self.budget = budget

    def on_mount(self) -> None:
        self.update(self.render_content())

    def header(self) -> str:
        parts = [f"{sources_summary(self.sources)} from {self.sources[0].collection}"]
        if self.left_out:
            parts.append(left_out_words(self.left_out, self.budget))
        if self.forecast_s is not None:
            parts.append(f"~{fmt_seconds(self.forecast_s)} to prefill")
        return " · ".join(parts)

    def render_content(self) -> Content:
        lines: list[tuple[str, str] | str] = [(self.header(), "bold")]
        best = best_score(self.sources)
        for s in self.sources:
            lines.append("\n" + s.describe(place=shown_path(s.place), stale=False, best=best))
            if s.stale:
                lines.append((f" · {s.stale}", "$text-warning"))
        return Content.assemble(*lines)
