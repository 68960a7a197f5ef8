"""Tiny random models for the app tests (loaded once; a turn takes milliseconds)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    from mlxchat.models.loader import load_folder
    from mlxchat.models.tiny import write_tiny_model

    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny")), name="tiny",
                       spec="tiny")


@pytest.fixture(scope="session")
def tiny_b(tmp_path_factory):
    """A second model to switch to."""
    from mlxchat.models.loader import load_folder
    from mlxchat.models.tiny import write_tiny_model

    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-b"), seed=1,
                                        context_window=1024), name="tiny-b", spec="tiny-b")
