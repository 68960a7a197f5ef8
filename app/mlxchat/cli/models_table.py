"""`mlxchat models`: the catalog as a table that fits the terminal (the least
wanted columns left out first, the source shortened from its start, a line
saying what was left out); piped, every column whole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mlxchat.chat import human_bytes
from mlxchat.table_fit import fit_columns, shorten_start

if TYPE_CHECKING:
    from mlxchat.models import ModelEntry

COLUMNS = ("ALIAS", "SIZE", "CONTEXT", "NEEDS", "FITS", "ON DISK", "LICENCE", "SOURCE")
PRIORITY = ("ALIAS", "FITS", "CONTEXT", "ON DISK", "SOURCE", "SIZE", "NEEDS", "LICENCE")
"""Which columns stay when the terminal is narrow, most wanted first."""
GAP = 2


def _row(e: ModelEntry) -> dict[str, str]:
    size = "-" if e.size_bytes is None else (
        human_bytes(e.size_bytes) + ("" if e.size_on_disk else " (download)"))
    return {"ALIAS": e.alias, "SIZE": size,
            "CONTEXT": f"{e.context_window:,}" if e.context_window else "-",
            "NEEDS": human_bytes(e.needed_bytes) if e.needed_bytes else "?", "FITS": e.fits,
            "ON DISK": "yes" if e.available_offline else "no", "LICENCE": e.licence or "-",
            "SOURCE": e.source}


def models_table(entries: Sequence[ModelEntry], width: int | None) -> str:
    """The table in ``width`` columns (None: every column whole)."""
    rows = [dict(zip(COLUMNS, COLUMNS))] + [_row(e) for e in entries]
    natural = {c: max(len(r[c]) for r in rows) for c in COLUMNS}
    if width is None:
        widths = natural
    else:  # the last column needs no gap after it: one more gap's room
        widths = fit_columns(natural, PRIORITY, width + GAP, padding=GAP, shrinks="SOURCE")
    lines = ["  ".join((shorten_start(r[c], w) if c == "SOURCE" else r[c]).ljust(w)
                       for c, w in widths.items()).rstrip() for r in rows]
    left_out = [c for c in COLUMNS if c not in widths]
    if left_out:
        lines.append(f"({', '.join(c.lower() for c in left_out)} left out at {width} "
                     "columns: a wider terminal or `mlxchat models --json` shows them)")
    return "\n".join(lines)
