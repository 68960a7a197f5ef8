"""The one error the model side raises; importable without MLX."""


class ModelError(Exception):
    """A model could not be resolved, fetched, converted or loaded (one-line message)."""
