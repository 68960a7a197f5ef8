"""Counting the chat template's renders: every module that calls the engine's
``render`` (prompt/render.py) has it routed through a spy."""

from __future__ import annotations

import sys
from typing import Any, Callable


def spy_on_render(monkeypatch: Any, spy: Callable[..., Any]) -> Callable[..., Any]:
    """Route every project module's ``render`` through ``spy``; returns the real one."""
    from mlxchat.engine.prompt import render as module

    real = module.render
    for name, mod in list(sys.modules.items()):
        if name.startswith("mlxchat.") and getattr(mod, "render", None) is real:
            monkeypatch.setattr(mod, "render", spy)
    return real
