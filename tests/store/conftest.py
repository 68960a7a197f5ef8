"""Fixtures of the session-store tests: a store on a real file in a temp folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxchat.store import SessionStore, open_store


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """MLXCHAT_HOME pointed at an empty temp folder."""
    folder = tmp_path / "home"
    monkeypatch.setenv("MLXCHAT_HOME", str(folder))
    return folder


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[SessionStore]:
    s = open_store(db_path)
    yield s
    s.close()
