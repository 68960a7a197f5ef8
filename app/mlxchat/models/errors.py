"""The one error the model side raises; importable without MLX."""

from mlxchat.errors import MlxchatError


class ModelError(MlxchatError):
    """A model could not be resolved, fetched, converted or loaded (one-line message)."""
