"""Which way the transcript draws an image: the real picture (Kitty graphics
protocol or Sixel, drawn by ``textual-image``), half-blocks, or the one-line
label; and the probe that asks the terminal before Textual starts (from then
on Textual's thread reads every reply on stdin).

The probe asks through ``terminal_query`` (never inside tmux or screen), which
keeps the keys typed meanwhile for the app (``typed_ahead``). ``textual-image``
0.12 (the last release for Python 3.11) would ask again as it is imported,
reading stdin for 0.1 s a query and eating the keys it finds there: its
queries are refused before it is imported (``quiet_textual_image``). Where no
reply came, the terminal's own variables say it."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from mlxchat.tui.terminal_query import TerminalAnswers, ask, in_multiplexer

if TYPE_CHECKING:
    from textual.message import Message

Kind = Literal["kitty", "sixel", "halfblock", "label"]

_probed: Kind | None = None
"""What the terminal answered in ``probe``; None when it was not asked or drew neither."""
_typed_ahead = ""
"""Keys the probe read while it waited for the terminal's replies."""


def from_environment(env: Mapping[str, str]) -> Kind | None:
    """The picture protocol a terminal's variables name, or None. Not inside
    tmux or screen: they carry the outer terminal's variables but not its
    graphics."""
    if in_multiplexer(env):
        return None
    program = env.get("TERM_PROGRAM", "").lower()
    if env.get("TERM") in ("xterm-kitty", "xterm-ghostty") or env.get("KITTY_WINDOW_ID") \
            or program == "ghostty":
        return "kitty"  # both draw Kitty's Unicode placeholders
    if program in ("wezterm", "iterm.app") or env.get("TERM") in ("foot", "foot-extra", "mlterm"):
        return "sixel"  # WezTerm draws no placeholders; iTerm2 3.5 draws Sixel
    return None


def _replied(answers: TerminalAnswers) -> Kind | None:
    """Sixel first (Konsole and WezTerm answer the Kitty query too, but draw
    no Unicode placeholders), then Kitty graphics."""
    if answers.sixel:
        return "sixel"
    return "kitty" if answers.kitty else None


def quiet_textual_image() -> None:
    """Refuse textual-image's own terminal queries (before it is imported):
    run before Textual, they eat the keys typed meanwhile; run after, their
    replies land in the input. Its cell size then comes from the window's
    size in pixels, else 10x20."""
    from textual_image import _terminal

    def refused(*args: object, **kwargs: object) -> None:
        raise _terminal.TerminalError("the terminal is asked by mlxchat's probe only")
    _terminal.capture_terminal_response = refused  # type: ignore[assignment]


def probe(setting: str, env: Mapping[str, str] | None = None) -> Kind | None:
    """Before the app runs: ask the terminal what it draws (only when the
    setting may draw a real picture, both ends are a terminal and no
    multiplexer sits between)."""
    global _probed, _typed_ahead
    env = os.environ if env is None else env
    quiet_textual_image()
    if setting not in ("auto", "kitty", "sixel") or env.get("TERM") == "dumb":
        return None
    streams = (sys.__stdin__, sys.__stdout__)
    if not all(s is not None and s.isatty() for s in streams) or in_multiplexer(env):
        return None
    answers = ask(streams[0].fileno(), streams[1].fileno())  # type: ignore[union-attr]
    _typed_ahead += answers.typed
    _probed = _replied(answers) or from_environment(env)
    return _probed


def typed_ahead() -> list[Message]:
    """The keys the probe read, as Textual's events, once: the app posts them
    as it loads, before its driver reads the rest."""
    global _typed_ahead
    from textual._xterm_parser import XTermParser

    typed, _typed_ahead = _typed_ahead, ""
    if not typed:
        return []
    parser = XTermParser()
    return [*parser.feed(typed), *parser.feed("")]  # "": a lone escape is a key too


def kind_for(setting: str, *, colour: bool, probed: Kind | None = None) -> Kind:
    """How to draw: a forced protocol as asked; 'auto' the probed protocol,
    else half-blocks; the label wherever colours are off."""
    if setting in ("kitty", "sixel"):
        return setting  # type: ignore[return-value]
    if setting == "label" or not colour:
        return "label"
    if setting == "auto":
        return probed or _probed or "halfblock"
    return "halfblock"
