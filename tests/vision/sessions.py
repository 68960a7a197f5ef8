"""A tiny vision-language model through the conversation, as every family's
session test drives it: the reopened session (an image asked about twice, the
session reopened on a fresh load and asked a third time, the same three
questions in a cold session) and /retry, /edit and a branch switched back to."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxchat.chat import ImageRef
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store
from mlxchat.store.image_files import store_image

from .conftest import load, make_image

QUESTIONS = ("What is this?", "Tell me more.", "And the corners?")


def make(folder, db: Path) -> tuple[Conversation, Any]:
    """A conversation on a fresh load of the folder's model, and the model."""
    settings = Settings(system_prompt="Be brief.")
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 8
    loaded = load(folder)
    conv = Conversation(settings=settings, store=open_store(db), engine=ChatEngine(loaded),
                        model_spec="tiny-vl")
    return conv, loaded.model


def last(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


@dataclass
class Reopened:
    """The reopened session's turns and the first session's model (its tower's
    calls after each of its two turns; the image as the message keeps it)."""

    model: Any
    calls: list[int]
    stored: tuple[ImageRef, ...]
    first: TurnDone
    warm: TurnDone
    resumed: TurnDone


def reopened_session(folder, tmp_path: Path) -> Reopened:
    """The follow-up prefills only its new message; reopened on a fresh load,
    the image's KV comes back from the segments (no tower call) and the third
    question prefills only itself; a cold session answers the same."""
    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    conv, model = make(folder, tmp_path / "s.db")
    conv.turns.images.append(store_image(Path(shot.path), width=100, height=70))
    first = last(conv.turns.send(QUESTIONS[0]))
    calls = [model.vision_calls]
    assert conv.turns.images == []
    warm = last(conv.turns.send(QUESTIONS[1]))
    calls.append(model.vision_calls)
    assert warm.stats.prefilled_tokens == len(conv.session.messages[-2].token_ids)
    sid, stored = conv.session.id, conv.session.messages[0].images
    assert len(stored) == 1 and stored[0].digest == shot.digest
    conv.close()

    again, fresh = make(folder, tmp_path / "s.db")
    again.open_session(sid)
    assert again.session.messages[0].images == stored
    resumed = last(again.turns.send(QUESTIONS[2]))
    assert fresh.vision_calls == 0  # the image's KV came back from the segments
    assert resumed.stats.cache_source == "snapshot"
    assert resumed.stats.prefilled_tokens == len(again.session.messages[-2].token_ids)
    assert resumed.stats.reused_tokens == warm.stats.context_used
    again.close()

    cold, _ = make(folder, tmp_path / "c.db")
    cold.turns.images.append(store_image(Path(shot.path)))
    assert [last(cold.turns.send(q)).reply for q in QUESTIONS] == [
        first.reply, warm.reply, resumed.reply]
    cold.close()
    return Reopened(model, calls, stored, first, warm, resumed)


@dataclass
class Branched:
    """The turns of ``retry_edit_and_branch``, the follow-up's words before and
    after the edit, and the tower's calls after the first turn."""

    first: TurnDone
    follow: TurnDone
    again: TurnDone
    edited: TurnDone
    asked: list[int]
    now: list[int]
    calls: int


def retry_edit_and_branch(folder, tmp_path: Path) -> Branched:
    """An image, a follow-up, /retry of it (the same reply), /edit of it, then
    the first branch switched back to and asked more: the image stays on its
    message, three branches, and the tower never runs after the first turn;
    the branch switched back to reuses at least the image's turn."""
    shot = make_image(tmp_path / "shot.png", (60, 60), 4)
    conv, model = make(folder, tmp_path / "s.db")
    conv.turns.images.append(store_image(Path(shot.path)))
    first = last(conv.turns.send(QUESTIONS[0]))
    calls = model.vision_calls
    assert calls >= 1  # once an image; SmolVLM once a tile
    follow = last(conv.turns.send(QUESTIONS[1]))
    asked = list(conv.session.messages[-2].token_ids)
    leaf = conv.session.messages[-1].id
    again = last(conv.turns.retry())
    assert again.reply == follow.reply
    edited = last(conv.turns.edit_last("What colour is this?"))
    now = list(conv.session.messages[-2].token_ids)
    assert conv.session.messages[0].images != ()
    assert model.vision_calls == calls
    assert len(conv.saved.branches()) == 3  # the first reply, the retry, the edit
    conv.saved.switch_branch(leaf)
    back = last(conv.turns.send(QUESTIONS[2]))
    assert back.reply and model.vision_calls == calls
    assert back.stats.reused_tokens >= first.stats.context_used
    conv.close()
    return Branched(first, follow, again, edited, asked, now, calls)
