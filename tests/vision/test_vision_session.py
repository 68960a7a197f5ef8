"""Images through the conversation: stored once, referenced from the message,
and after a reopen (a restart) the image's KV comes back from the segments:
a follow-up prefills only its new text and the vision tower does not run."""

from __future__ import annotations

from pathlib import Path

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store
from mlxchat.store.image_files import store_image

from .conftest import load, make_image


def make(folder, db: Path) -> tuple[Conversation, object]:
    settings = Settings(system_prompt="Be brief.")
    settings.generation.temperature = 0.0
    settings.generation.max_tokens = 8
    loaded = load(folder)
    conv = Conversation(settings=settings, store=open_store(db), engine=ChatEngine(loaded),
                        model_spec="tiny-vl")
    return conv, loaded.model


def last(events) -> TurnDone:
    return [e for e in events if isinstance(e, TurnDone)][-1]


def test_a_reopened_session_asks_more_without_computing_the_image_again(qwen_folder,
                                                                       tmp_path):
    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    conv, model = make(qwen_folder, tmp_path / "s.db")
    conv.turns.images.append(store_image(Path(shot.path), width=100, height=70))
    first = last(conv.turns.send("What is this?"))
    assert model.vision_calls == 1 and conv.turns.images == []
    warm = last(conv.turns.send("Tell me more."))
    assert warm.stats.prefilled_tokens == len(conv.session.messages[-2].token_ids)
    sid = conv.session.id
    stored = conv.session.messages[0].images
    assert len(stored) == 1 and stored[0].digest == shot.digest
    conv.close()

    again, fresh = make(qwen_folder, tmp_path / "s.db")
    again.open_session(sid)
    assert again.session.messages[0].images == stored
    resumed = last(again.turns.send("And the corners?"))
    assert fresh.vision_calls == 0  # the image's KV came back from the segments
    assert resumed.stats.cache_source == "snapshot"
    assert resumed.stats.prefilled_tokens == len(again.session.messages[-2].token_ids)
    assert resumed.stats.reused_tokens == warm.stats.context_used
    again.close()

    cold, model_cold = make(qwen_folder, tmp_path / "c.db")
    cold.turns.images.append(store_image(Path(shot.path)))
    replies = [last(cold.turns.send(q)).reply
               for q in ("What is this?", "Tell me more.", "And the corners?")]
    assert replies == [first.reply, warm.reply, resumed.reply]
    cold.close()


def test_retry_and_edit_keep_the_image(qwen_folder, tmp_path):
    shot = make_image(tmp_path / "shot.png", (60, 60), 4)
    conv, model = make(qwen_folder, tmp_path / "s.db")
    conv.turns.images.append(store_image(Path(shot.path)))
    first = last(conv.turns.send("What is this?"))
    again = last(conv.turns.retry())
    assert again.reply == first.reply and again.stats.reused_tokens > 0
    edited = last(conv.turns.edit_last("What colour is this?"))
    assert conv.session.messages[-2].images == conv.session.messages[-2].images[:1] != ()
    assert edited.stats.prompt_tokens > 0 and model.vision_calls == 1
    conv.close()
