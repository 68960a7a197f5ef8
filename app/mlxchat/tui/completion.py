"""Slash-command completion items, as the prompt input shows them (no Textual)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Completion:
    """One completion; the command registry provides objects with the same fields."""

    value: str
    """The full replacement text of the input, e.g. '/model ' or '/model qwen3-4b'."""
    display: str
    """What the list shows, e.g. '/model' or 'qwen3-4b'."""
    help: str = ""
    """One line shown dimmed next to ``display``."""


CompletionSource = Callable[[str], "list[Completion]"]
"""``complete(text)`` -> completions for the whole input text (which starts with '/')."""
