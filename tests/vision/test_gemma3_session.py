"""Gemma 3 images through the conversation: a reopened session asks more
without the tower, /retry and /edit keep the image, and a branch switched
back to resumes without computing the image again."""

from __future__ import annotations

from .sessions import reopened_session, retry_edit_and_branch


def test_a_reopened_gemma3_session_asks_more_without_the_tower(gemma3_folder, tmp_path):
    assert reopened_session(gemma3_folder, tmp_path).calls == [1, 1]


def test_retry_edit_and_branches_keep_the_image(gemma3_folder, tmp_path):
    turns = retry_edit_and_branch(gemma3_folder, tmp_path)
    assert turns.again.stats.reused_tokens > 0
    assert turns.edited.stats.prompt_tokens > 0
    assert turns.calls == 1
