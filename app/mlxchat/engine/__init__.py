"""The chat engine: model + live KV cache + one generation thread. No UI imports."""

from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import (ContextOverflowError, EngineError, EngineState, Event,
                                   PrefillProgress, SnapshotInfo, SnapshotLoad, TextDelta,
                                   TurnDone)

__all__ = ["ChatEngine", "ContextOverflowError", "EngineError", "EngineState", "Event",
           "PrefillProgress", "SnapshotInfo", "SnapshotLoad", "TextDelta", "TurnDone"]
