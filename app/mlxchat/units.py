"""How figures are written, for every layer that shows them: pure functions, stdlib only.

Byte sizes and times of day stay with the records in ``mlxchat.chat``
(``human_bytes``, ``relative_time``).
"""

from __future__ import annotations


def fmt_int(n: float) -> str:
    """A count with thousands separators: 1234567 -> '1,234,567' (a float is truncated)."""
    return f"{int(n):,}"


def plural(n: int, word: str) -> str:
    """'1 message', '3 messages'."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def fmt_seconds(s: float | None) -> str:
    """0.0421 -> '42 ms', 1.5 -> '1.50 s', 75 -> '1 min 15 s'; None (not
    measured) -> '—'."""
    if s is None:
        return "—"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.2f} s"
    minutes, seconds = divmod(round(s), 60)
    return f"{minutes} min {seconds} s"


def fmt_tps(tps: float | None) -> str:
    """1234.56 -> '1,234.6 tok/s'; None (nothing measured yet) -> '— tok/s'."""
    return "— tok/s" if tps is None else f"{tps:,.1f} tok/s"


def fmt_gauge_percent(part: int, whole: int) -> str:
    """For a gauge: 799 of 1000 -> '79%', whole percent rounded down so the figure
    never shows a level it has not reached; '–' without a whole."""
    return f"{part * 100 // whole}%" if whole > 0 else "–"


def fmt_report_percent(part: float, whole: float) -> str:
    """For a command's report: 1 of 8 -> '12.5%', to a tenth; '-' when ``whole`` is 0."""
    return f"{100 * part / whole:.1f}%" if whole else "-"
