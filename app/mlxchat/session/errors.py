"""The conversation layer's own error."""

from mlxchat.errors import MlxchatError


class ConversationError(MlxchatError):
    """A request that cannot be carried out; one line for the user."""
