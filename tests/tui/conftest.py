"""More tiny models for the app tests (`tiny` itself is in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_b(tmp_path_factory):
    """A second model to switch to."""
    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model

    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-b"), seed=1,
                                        context_window=1024), name="tiny-b", spec="tiny-b")


@pytest.fixture(scope="session")
def tiny_long(tmp_path_factory):
    """The tiny model with a 32k window, for a reply the test stops: it outlasts
    anything a test does meanwhile (one to the 2k window took 1 to 5 s)."""
    from mlxchat.models import load_folder
    from mlxchat.models.testing.text import write_tiny_model

    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-long"),
                                        context_window=32768), name="tiny", spec="tiny")


@pytest.fixture(autouse=True)
def no_idle_compaction(monkeypatch):
    """The app joins a session's segment files after 30 s idle; a slow test
    on a loaded machine must not have its files joined under it. The tests
    of that idle join set their own delay."""
    monkeypatch.setattr("mlxchat.session.compaction.IDLE_JOIN_S", 3600.0)
