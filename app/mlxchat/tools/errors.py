"""The errors of tools: each message is the one line the user sees."""

from __future__ import annotations

from mlxchat.errors import MlxchatError


class ToolsError(MlxchatError):
    """The tools configuration, a server or a call cannot be used as asked."""
