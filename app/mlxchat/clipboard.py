"""Copying text out: with the system's clipboard tool (pbcopy, wl-copy, xclip,
xsel; tmux's own buffer inside tmux) and, in the app, through the terminal
(OSC 52, which a terminal or tmux may not pass on). Every way that worked is
named, so the user knows where to paste from. Stdlib only."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Callable

from mlxchat.errors import MlxchatError

TOOLS: tuple[tuple[str, ...], ...] = (
    ("pbcopy",), ("wl-copy",), ("xclip", "-selection", "clipboard"),
    ("xsel", "--clipboard", "--input"))
TMUX = ("tmux", "load-buffer", "-")


class ClipboardError(MlxchatError):
    """No way to copy worked here; one line for the user."""


def system_tools(environ: dict[str, str] | None = None) -> list[tuple[str, ...]]:
    """The clipboard tools that can work in this session, the system's first."""
    env = os.environ if environ is None else environ
    found = []
    for tool in TOOLS:
        if shutil.which(tool[0]) is None:
            continue
        if tool[0] == "wl-copy" and not env.get("WAYLAND_DISPLAY"):
            continue
        if tool[0] in ("xclip", "xsel") and not env.get("DISPLAY"):
            continue
        found.append(tool)
        break  # one system clipboard is enough
    if env.get("TMUX") and shutil.which("tmux"):
        found.append(TMUX)
    return found


def _run(argv: tuple[str, ...], text: str) -> bool:
    try:
        subprocess.run(argv, input=text.encode("utf-8"), check=True, timeout=5,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       stdin=None)
    except (subprocess.SubprocessError, OSError):
        return False
    return True


def copy(text: str, *, terminal: Callable[[str], None] | None = None,
         tools: list[tuple[str, ...]] | None = None) -> list[str]:
    """Copy ``text`` every way that works here; the ways, in words. ``terminal``
    sends it through the terminal (OSC 52). ClipboardError when none did."""
    ways = []
    for tool in system_tools() if tools is None else tools:
        if _run(tool, text):
            ways.append("tmux's buffer (prefix ] pastes)" if tool == TMUX else tool[0])
    if terminal is not None:
        terminal(text)
        ways.append("the terminal (OSC 52, if it allows it)")
    if not ways:
        raise ClipboardError("No clipboard here (none of pbcopy, wl-copy, xclip, xsel or tmux "
                             "works); select the text with the mouse instead.")
    return ways


def said(ways: list[str]) -> str:
    """'with wl-copy and to the terminal (OSC 52, ...)'."""
    tools = [w for w in ways if not w.startswith("the terminal")]
    parts = ([f"with {' and '.join(tools)}"] if tools else []) + (
        [f"to {w}" for w in ways if w.startswith("the terminal")])
    return " and ".join(parts)
