"""Which columns of a table fit a width, and how wide each is: every figure
whole, the least wanted columns left out first, one column (a source, a path)
shortened from its start before it goes. The /models picker and `mlxchat
models` both lay their tables out with it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def fit_columns(natural: Mapping[str, int], priority: Sequence[str], room: int, *,
                padding: int, shrinks: str | None = None, shrink_min: int = 16
                ) -> dict[str, int]:
    """The columns of ``natural`` (name: the width its widest cell needs) shown
    in ``room`` cells, in ``natural``'s order, each with ``padding`` cells beside
    it; ``priority`` lists them most wanted first. ``shrinks`` may be narrowed to
    ``shrink_min`` to stay, and takes whatever room is left."""
    chosen: dict[str, int] = {}
    left = room
    for column in priority:
        least = min(natural[column], shrink_min) if column == shrinks else natural[column]
        if least + padding <= left:
            chosen[column] = least
            left -= least + padding
    if shrinks in chosen:
        chosen[shrinks] = min(natural[shrinks], chosen[shrinks] + left)
    return {c: chosen[c] for c in natural if c in chosen}


def shorten_start(text: str, width: int) -> str:
    """``text`` longer than ``width`` (a deep path, a long repo id) shows its end."""
    return text if len(text) <= width else "…" + text[-(width - 1):]
