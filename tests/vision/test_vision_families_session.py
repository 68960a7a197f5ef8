"""Every family's images through the conversation, as Qwen2-VL's and Gemma 3's
(the scenarios of sessions.py): /retry, /edit and a branch
switched back to keep the image and never run the tower again, and a
reopened session (Mistral 3, Qwen2.5-VL, Qwen3-VL) asks more without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import write_family
from .mistral3_models import write_mistral3
from .sessions import reopened_session, retry_edit_and_branch
from .smolvlm_models import smolvlm_template


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
    turns = retry_edit_and_branch(family_folder, tmp_path)
    follow, again, edited = turns.follow, turns.again, turns.edited
    # A retry feeds the prompt's last token again (for its logits), nothing more.
    assert (again.stats.reused_tokens, again.stats.prefilled_tokens) == (
        follow.stats.prompt_tokens - 1, 1)
    same = next(i for i, (a, b) in enumerate(zip(turns.asked + [None], turns.now)) if a != b)
    # An edit reuses the image's turn and what the new words share with the old.
    assert edited.stats.reused_tokens == turns.first.stats.context_used + same
    assert edited.stats.prefilled_tokens == len(turns.now) - same


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "mistral3"])
def test_a_reopened_session_asks_more_without_the_tower(family, tmp_path):
    assert reopened_session(write(tmp_path / "model", family), tmp_path).calls == [1, 1]
