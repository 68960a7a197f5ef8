"""The Textual presentation layer: widgets and screens that render plain data.

Importing this package does not import Textual; the widgets live in
``mlxchat.tui.widgets`` and the screens in ``mlxchat.tui.screens``.
"""

from __future__ import annotations

from pathlib import Path

STYLESHEET = Path(__file__).with_name("mlxchat.tcss")
"""The app stylesheet; shipped in the wheel as package data."""

WIDE_MIN_COLUMNS = 100
"""From this width the gauges are a right sidebar; below it, a compact bar on top."""

HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE_MIN_COLUMNS, "-wide")]
"""Set as ``App.HORIZONTAL_BREAKPOINTS``: the stylesheet switches layouts on these classes."""
