"""The conversation layer: one open session driving one engine.

``Conversation`` (conversation.py) is its face; ``root.open_conversation`` is
the one place that builds store + model + engine + Conversation. The parts a
conversation holds live beside it, one module each. The engine's events and
state are what a conversation reports: the UI takes them from here and never
imports the engine.
"""

from mlxchat.chat import Attachment
from mlxchat.engine.events import (
                                   EngineError,
                                   EngineState,
                                   Event,
                                   PrefillProgress,
                                   SnapshotLoad,
                                   TextDelta,
                                   TurnDone,
)
from mlxchat.session.conversation import Conversation, ConversationError
from mlxchat.session.typing_ahead import settled_text

__all__ = ["Attachment", "Conversation", "ConversationError", "EngineError", "EngineState",
           "Event", "PrefillProgress", "SnapshotLoad", "TextDelta", "TurnDone", "settled_text"]
