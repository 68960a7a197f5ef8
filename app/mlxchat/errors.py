"""Which exceptions are the user's doing, and the one line they get for each."""

from __future__ import annotations


def user_message(exc: BaseException) -> str | None:
    """The one-line message for an expected error, or None for a real bug."""
    from mlxchat.cli import UserError
    from mlxchat.config import ConfigError
    from mlxchat.conversation import ConversationError
    from mlxchat.engine.events import EngineError
    from mlxchat.models.errors import ModelError
    from mlxchat.store import StoreError

    expected = (UserError, ConfigError, ConversationError, EngineError, ModelError, StoreError)
    if isinstance(exc, expected):
        return " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, PermissionError)):
        return f"{exc.strerror}: {exc.filename}"
    return None
