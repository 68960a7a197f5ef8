"""The errors of document collections: each message is the one line the user sees."""

from __future__ import annotations

from mlxchat.errors import MlxchatError


class DocsError(MlxchatError):
    """A document collection cannot be built or searched as asked."""
