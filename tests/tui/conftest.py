"""A second tiny model for the app tests (`tiny` itself is in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_b(tmp_path_factory):
    """A second model to switch to."""
    from mlxchat.models.loader import load_folder
    from mlxchat.models.tiny import write_tiny_model

    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-b"), seed=1,
                                        context_window=1024), name="tiny-b", spec="tiny-b")
