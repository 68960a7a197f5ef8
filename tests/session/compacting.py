"""Conversations that outgrow their window, on tiny random models: built,
filled and compacted the same way by the compaction tests."""

from __future__ import annotations

from pathlib import Path

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

from tests.waiting import until

WINDOW = 768
"""The sessions' window (a byte-level vocabulary: a token a character)."""


def make(model, db: Path, *, ahead: bool = True, policy: str = "compact",
         compact_at: int = 50, engine: ChatEngine | None = None,
         recall: bool = False) -> Conversation:
    """A conversation in a 768-token window; recall off unless asked for (its
    passages would take a third of such a window)."""
    settings = Settings(system_prompt="Be brief.")
    gen = settings.generation
    gen.temperature, gen.max_tokens, gen.context_window = 0.0, 8, WINDOW
    gen.max_reasoning_tokens = 8  # a reasoning family's reply keeps a small reserve too
    gen.context_policy, gen.compact_at, gen.recall = policy, compact_at, recall
    conv = Conversation(settings=settings, store=open_store(db),
                        engine=engine or ChatEngine(model), model_spec="tiny")
    conv.compactor.ahead = ahead
    return conv


def question(i: int) -> str:
    return f"Question {i}: tell me about topic {i * 7}."


def last(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


def settled(conv: Conversation) -> str:
    """Wait until the compaction is not being prepared; its state then."""
    until(lambda: conv.compactor.status().state != "preparing")
    return conv.compactor.status().state


def fill(conv: Conversation, turns: int, start: int = 0) -> list[TurnDone]:
    """``turns`` questions, each sent once the preparation before it settled."""
    done = []
    for i in range(start, start + turns):
        done.append(last(conv.turns.send(question(i))))
        settled(conv)
    return done


def until_switch(conv: Conversation, start: int = 0, most: int = 40) -> tuple[TurnDone, int]:
    """Questions until a turn switches to a compaction: that turn, and the next question's number."""
    for i in range(start, start + most):
        done = last(conv.turns.send(question(i)))
        if done.stats.compaction:
            return done, i + 1
        settled(conv)
    raise AssertionError("no turn ever compacted")
