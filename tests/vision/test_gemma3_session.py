"""Gemma 3 images through the conversation: a reopened session asks more
without the tower, /retry and /edit keep the image, and a branch switched
back to resumes without computing the image again."""

from __future__ import annotations

from pathlib import Path

from mlxchat.store.image_files import store_image

from .conftest import make_image
from .gemma3_models import gemma3_folder  # noqa: F401 (fixture)
from .test_vision_session import last, make


def test_a_reopened_gemma3_session_asks_more_without_the_tower(gemma3_folder, tmp_path):  # noqa: F811
    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    conv, model = make(gemma3_folder, tmp_path / "s.db")
    conv.turns.images.append(store_image(Path(shot.path), width=100, height=70))
    first = last(conv.turns.send("What is this?"))
    warm = last(conv.turns.send("Tell me more."))
    assert model.vision_calls == 1
    assert warm.stats.prefilled_tokens == len(conv.session.messages[-2].token_ids)
    sid = conv.session.id
    conv.close()

    again, fresh = make(gemma3_folder, tmp_path / "s.db")
    again.open_session(sid)
    resumed = last(again.turns.send("And the corners?"))
    assert fresh.vision_calls == 0
    assert resumed.stats.cache_source == "snapshot"
    assert resumed.stats.reused_tokens == warm.stats.context_used
    assert resumed.stats.prefilled_tokens == len(again.session.messages[-2].token_ids)
    again.close()

    cold, _ = make(gemma3_folder, tmp_path / "c.db")
    cold.turns.images.append(store_image(Path(shot.path)))
    replies = [last(cold.turns.send(q)).reply
               for q in ("What is this?", "Tell me more.", "And the corners?")]
    assert replies == [first.reply, warm.reply, resumed.reply]
    cold.close()


def test_retry_edit_and_branches_keep_the_image(gemma3_folder, tmp_path):  # noqa: F811
    shot = make_image(tmp_path / "shot.png", (60, 60), 4)
    conv, model = make(gemma3_folder, tmp_path / "s.db")
    conv.turns.images.append(store_image(Path(shot.path)))
    first = last(conv.turns.send("What is this?"))
    follow = last(conv.turns.send("Tell me more."))
    leaf = conv.session.messages[-1].id
    again = last(conv.turns.retry())
    assert again.reply == follow.reply and again.stats.reused_tokens > 0
    edited = last(conv.turns.edit_last("What colour is this?"))
    assert edited.stats.prompt_tokens > 0
    assert conv.session.messages[0].images != ()
    assert model.vision_calls == 1
    assert len(conv.saved.branches()) == 3  # the first reply, the retry, the edit
    conv.saved.switch_branch(leaf)
    back = last(conv.turns.send("And the corners?"))
    assert back.reply and model.vision_calls == 1
    assert back.stats.reused_tokens >= first.stats.context_used
    conv.close()
