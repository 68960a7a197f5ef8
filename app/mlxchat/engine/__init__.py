"""The chat engine: model + live KV cache + one generation thread. No UI imports.

The event and state types come from ``events`` (plain data); ``ChatEngine`` is
imported on first use, so that reading a type does not import MLX.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mlxchat.engine.events import (
    ContextOverflowError,
    EngineError,
    EngineState,
    Event,
    PrefillProgress,
    SnapshotInfo,
    SnapshotLoad,
    TextDelta,
    TurnDone,
)

if TYPE_CHECKING:
    from mlxchat.engine.core import ChatEngine

__all__ = ["ChatEngine", "ContextOverflowError", "EngineError", "EngineState", "Event",
           "PrefillProgress", "SnapshotInfo", "SnapshotLoad", "TextDelta", "TurnDone"]


def __getattr__(name: str) -> Any:
    if name != "ChatEngine":
        raise AttributeError(f"module 'mlxchat.engine' has no attribute {name!r}")
    value = importlib.import_module("mlxchat.engine.core").ChatEngine
    globals()[name] = value
    return value
