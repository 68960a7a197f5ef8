"""The gauges' text: a figure redrawn only when it changed, and one line of
figures that fits its width by leaving parts out, never by cutting one (at 80
columns '… · reused 31 / new 1 · miss: rep…' was cut mid-figure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from textual.content import Content
from textual.widgets import Static

SEPARATOR = " · "


class GaugeText(Static):
    """A figure's text, redrawn only when it changed."""

    shown: str | None = None

    def show(self, markup: str) -> None:
        if markup == self.shown:
            return  # unchanged (the weights while a reply streams): nothing to draw
        # The same number of rows on screen: a repaint will do. A layout pass of
        # the whole screen costs ~10 ms, and live figures change many times a
        # second; a line that now wraps (a count grown a digit) needs one.
        same = self.shown is not None and self._rows(self.shown) == self._rows(markup)
        self.shown = markup
        self.update(markup, layout=not same)

    def _rows(self, markup: str) -> int:
        width = max(self.content_size.width, 1)
        return sum(max(1, -(-cell_len(line) // width))
                   for line in Content.from_markup(markup).plain.split("\n"))


@dataclass(frozen=True)
class Part:
    """A figure (or a few words) of a line, in Textual markup."""

    forms: tuple[str, ...]
    """The part written out, then shorter ways to say it; left out when even
    the last does not fit."""
    rank: int = 0
    """Parts of a higher rank give way first (shortened, then left out)."""


def part(*forms: str, rank: int = 0) -> Part:
    return Part(tuple(forms), rank)


def cells(markup: str) -> int:
    return Content.from_markup(markup).cell_length


def fit(parts: Sequence[Part], width: int) -> str:
    """The parts joined in their order, each in the longest form that lets the
    line fit ``width`` cells, the highest ranks shortened or left out first."""
    chosen = [0] * len(parts)

    def line() -> str:
        return SEPARATOR.join(p.forms[i] for p, i in zip(parts, chosen) if i < len(p.forms))
    by_rank = sorted(range(len(parts)), key=lambda k: parts[k].rank)
    for k in reversed(by_rank):
        while cells(line()) > width and chosen[k] < len(parts[k].forms):
            chosen[k] += 1
    for k in by_rank:  # room a shorter part left: the most telling parts back first
        while chosen[k]:
            chosen[k] -= 1
            if cells(line()) > width:
                chosen[k] += 1
                break
    return line()


class FittedLine(GaugeText):
    """One line of parts fitted to its width, again when the width changes."""

    parts: tuple[Part, ...] = ()

    def show(self, markup: str | Sequence[Part]) -> None:
        self.parts = (part(markup),) if isinstance(markup, str) else tuple(markup)
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        width = self.content_size.width
        super().show(fit(self.parts, width) if width else SEPARATOR.join(
            p.forms[0] for p in self.parts))
