"""A real Conversation on a tiny random model, a temp store and a temp MLXCHAT_HOME."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxchat.commands import CommandContext, CommandResult, Registry, default_registry
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel, ModelError, load_folder
from mlxchat.models.testing.text import write_tiny_model
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

NOW = 1_750_000_000.0
SYSTEM = "You are terse."


@pytest.fixture(scope="session")
def tiny_b(tmp_path_factory) -> LoadedModel:
    """A second model, to switch to (head_dim 64, so its KV cache can be quantized)."""
    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-b"), hidden_size=128,
                                        num_heads=2, num_kv_heads=1, intermediate_size=128,
                                        context_window=1024), name="tiny-b", spec="tiny-b")


@pytest.fixture(scope="session")
def registry() -> Registry:
    return default_registry()


class ModelShelf:
    """The models a test conversation can load, by spec; a test adds its own."""

    def __init__(self, *models: LoadedModel):
        self.by_spec = {m.info.spec: m for m in models}

    def add(self, *models: LoadedModel, **named: LoadedModel) -> None:
        """Models under their own spec, and ``named`` ones under another spec."""
        self.by_spec.update({m.info.spec: m for m in models}, **named)

    def __call__(self, spec: str) -> LoadedModel:
        if spec not in self.by_spec:
            raise ModelError(f"unknown model '{spec[:40]}' (tests know "
                             f"{', '.join(self.by_spec)})")
        return self.by_spec[spec]


def make_conversation(tmp: Path, tiny: LoadedModel, *extra: LoadedModel,
                      shelf: ModelShelf | None = None) -> Conversation:
    settings = Settings(model="tiny", system_prompt=SYSTEM,
                        generation=GenerationSettings(temperature=0.0, max_tokens=8))
    shelf = shelf or ModelShelf()
    shelf.add(tiny, *extra)
    return Conversation(settings=settings, store=open_store(tmp / "s.db"),
                        engine=ChatEngine(tiny), model_spec="tiny", load_model=shelf)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLXCHAT_HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path / "home"


@pytest.fixture
def shelf() -> ModelShelf:
    """What ``conv`` can load besides tiny and tiny_b (a test adds its models)."""
    return ModelShelf()


@pytest.fixture
def conv(home: Path, tmp_path: Path, tiny, tiny_b, shelf: ModelShelf
         ) -> Iterator[Conversation]:
    conversation = make_conversation(tmp_path, tiny, tiny_b, shelf=shelf)
    yield conversation
    conversation.close()
    conversation.store.close()


@pytest.fixture
def copied() -> list[str]:
    return []


@pytest.fixture
def ctx(conv: Conversation, tmp_path: Path, copied: list[str]) -> CommandContext:
    return CommandContext(conv, clipboard=copied.append, config_path=tmp_path / "config.toml",
                          now=lambda: NOW, cwd=lambda: tmp_path / "work",
                          exports_dir=tmp_path / "exports", interactive=False)


def finish(result: CommandResult) -> TurnDone:
    """Consume a result's turn as a UI would; returns its TurnDone."""
    assert result.turn is not None, result.text
    done = [e for e in result.turn if isinstance(e, TurnDone)]
    assert len(done) == 1
    return done[0]


def send(conv: Conversation, text: str) -> TurnDone:
    done = [e for e in conv.turns.send(text) if isinstance(e, TurnDone)]
    assert len(done) == 1
    return done[0]
