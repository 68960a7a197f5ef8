"""Every family's images through the conversation, as Qwen2-VL's and Gemma 3's
(test_vision_session.py, test_gemma3_session.py): /retry, /edit and a branch
switched back to keep the image and never run the tower again, and a
reopened session (Mistral 3, Qwen2.5-VL, Qwen3-VL) asks more without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat.store.image_files import store_image

from .conftest import make_image, write_family
from .mistral3_models import write_mistral3
from .smolvlm_models import smolvlm_template
from .test_vision_session import last, make


def write(folder: Path, family: str) -> Path:
    if family == "mistral3":
        return write_mistral3(folder)
    if family == "smolvlm":
        from mlxchat.models.testing.smolvlm import write_tiny_smolvlm

        return write_tiny_smolvlm(folder, chat_template=smolvlm_template())
    return write_family(folder, family)


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl", "smolvlm", "mistral3"])
def family_folder(request, tmp_path_factory) -> Path:
    return write(tmp_path_factory.mktemp(request.param), request.param)


def test_retry_edit_and_branches_keep_the_image(family_folder, tmp_path):
    shot = make_image(tmp_path / "shot.png", (60, 60), 4)
    conv, model = make(family_folder, tmp_path / "s.db")
    conv.turns.images.append(store_image(Path(shot.path)))
    first = last(conv.turns.send("What is this?"))
    calls = model.vision_calls
    assert calls >= 1  # once an image; SmolVLM once a tile
    follow = last(conv.turns.send("Tell me more."))
    asked = list(conv.session.messages[-2].token_ids)
    leaf = conv.session.messages[-1].id
    again = last(conv.turns.retry())
    assert again.reply == follow.reply
    # A retry feeds the prompt's last token again (for its logits), nothing more.
    assert (again.stats.reused_tokens, again.stats.prefilled_tokens) == (
        follow.stats.prompt_tokens - 1, 1)
    edited = last(conv.turns.edit_last("What colour is this?"))
    now = list(conv.session.messages[-2].token_ids)
    same = next(i for i, (a, b) in enumerate(zip(asked + [None], now)) if a != b)
    # An edit reuses the image's turn and what the new words share with the old.
    assert edited.stats.reused_tokens == first.stats.context_used + same
    assert edited.stats.prefilled_tokens == len(now) - same
    assert conv.session.messages[0].images != ()
    assert model.vision_calls == calls
    assert len(conv.saved.branches()) == 3  # the first reply, the retry, the edit
    conv.saved.switch_branch(leaf)
    back = last(conv.turns.send("And the corners?"))
    assert back.reply and model.vision_calls == calls
    assert back.stats.reused_tokens >= first.stats.context_used
    conv.close()


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "mistral3"])
def test_a_reopened_session_asks_more_without_the_tower(family, tmp_path):
    folder = write(tmp_path / "model", family)
    shot = make_image(tmp_path / "shot.png", (100, 70), 3)
    conv, model = make(folder, tmp_path / "s.db")
    conv.turns.images.append(store_image(Path(shot.path), width=100, height=70))
    first = last(conv.turns.send("What is this?"))
    warm = last(conv.turns.send("Tell me more."))
    assert model.vision_calls == 1
    assert warm.stats.prefilled_tokens == len(conv.session.messages[-2].token_ids)
    sid = conv.session.id
    conv.close()

    again, fresh = make(folder, tmp_path / "s.db")
    again.open_session(sid)
    resumed = last(again.turns.send("And the corners?"))
    assert fresh.vision_calls == 0
    assert resumed.stats.cache_source == "snapshot"
    assert resumed.stats.reused_tokens == warm.stats.context_used
    assert resumed.stats.prefilled_tokens == len(again.session.messages[-2].token_ids)
    again.close()

    cold, _ = make(folder, tmp_path / "c.db")
    cold.turns.images.append(store_image(Path(shot.path)))
    replies = [last(cold.turns.send(q)).reply
               for q in ("What is this?", "Tell me more.", "And the corners?")]
    assert replies == [first.reply, warm.reply, resumed.reply]
    cold.close()
