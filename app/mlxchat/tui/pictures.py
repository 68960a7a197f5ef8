"""Which way the transcript draws an image: the real picture (Kitty graphics
protocol or Sixel, drawn by ``textual-image``), half-blocks, or the one-line
label; and the probe that asks the terminal before Textual starts (from then
on Textual's thread reads every reply on stdin).

``textual-image`` 0.12 is the last release for Python 3.11. Importing its
renderables on a terminal asks it: the DA1 reply (Sixel when it lists 4), then
a Kitty graphics query answered 'OK', and the cell size in pixels. Where no
reply came (tmux, a slow link), the terminal's own variables say it."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Literal

Kind = Literal["kitty", "sixel", "halfblock", "label"]

_probed: Kind | None = None
"""What the terminal answered in ``probe``; None when it was not asked or drew neither."""


def from_environment(env: Mapping[str, str]) -> Kind | None:
    """The picture protocol a terminal's variables name, or None. Not inside
    tmux or screen: they carry the outer terminal's variables but not its
    graphics."""
    if env.get("TMUX") or env.get("STY") or env.get("TERM", "").startswith(("screen", "tmux")):
        return None
    program = env.get("TERM_PROGRAM", "").lower()
    if env.get("TERM") in ("xterm-kitty", "xterm-ghostty") or env.get("KITTY_WINDOW_ID") \
            or program == "ghostty":
        return "kitty"  # both draw Kitty's Unicode placeholders
    if program in ("wezterm", "iterm.app") or env.get("TERM") in ("foot", "foot-extra", "mlterm"):
        return "sixel"  # WezTerm draws no placeholders; iTerm2 3.5 draws Sixel
    return None


def _replied() -> Kind | Literal[False] | None:
    """What the terminal answered the queries textual-image sends as it is
    imported; False when that failed (then nothing but half-blocks is tried)."""
    try:
        import textual_image.widget  # noqa: F401 - the cell size, asked once
        from textual_image import renderable
        from textual_image.renderable.sixel import Image as SixelImage
        from textual_image.renderable.tgp import Image as TGPImage
    except Exception:  # noqa: BLE001 - a terminal that answers oddly draws half-blocks
        return False
    if renderable.Image is SixelImage:
        return "sixel"
    return "kitty" if renderable.Image is TGPImage else None


def probe(setting: str, env: Mapping[str, str] | None = None) -> Kind | None:
    """Before the app runs: ask the terminal what it draws (only when the
    setting may draw a real picture and both ends are a terminal)."""
    global _probed
    env = os.environ if env is None else env
    if setting not in ("auto", "kitty", "sixel") or env.get("TERM") == "dumb":
        return None
    streams = (sys.__stdin__, sys.__stdout__)
    if not all(s is not None and s.isatty() for s in streams):
        return None
    replied = _replied()
    _probed = None if replied is False else replied or from_environment(env)
    return _probed


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
