"""Images through the conversation: stored once, referenced from the message,
and after a reopen (a restart) the image's KV comes back from the segments:
a follow-up prefills only its new text and the vision tower does not run."""

from __future__ import annotations

from pathlib import Path

from mlxchat.store.image_files import store_image

from .conftest import make_image
from .sessions import last, make, reopened_session


def test_a_reopened_session_asks_more_without_computing_the_image_again(qwen_folder,
                                                                       tmp_path):
    assert reopened_session(qwen_folder, tmp_path).calls == [1, 1]


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
