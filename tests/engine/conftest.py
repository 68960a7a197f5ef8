"""Tiny random llama models for engine tests: real MLX, milliseconds per turn."""

from __future__ import annotations

import pytest

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model


@pytest.fixture(scope="session")
def tiny_small_window(tmp_path_factory):
    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-w"), context_window=256))


@pytest.fixture
def engine(tiny):
    eng = ChatEngine(tiny)
    yield eng
    eng.close()


GREEDY = GenerationSettings(temperature=0.0, max_tokens=12)


def run(engine: ChatEngine, messages, settings=GREEDY) -> TurnDone:
    """Run a turn to the end; returns its TurnDone."""
    done = [ev for ev in engine.turn(messages, settings) if isinstance(ev, TurnDone)]
    assert len(done) == 1
    return done[0]


def conversation(n_user: int, replies: list[str] | None = None) -> list[Message]:
    msgs = [Message("system", "You are terse.")]
    for i in range(n_user):
        msgs.append(Message("user", f"Question number {i}: tell me about topic {i * 7}."))
        if replies and i < len(replies):
            msgs.append(Message("assistant", replies[i]))
    return msgs
