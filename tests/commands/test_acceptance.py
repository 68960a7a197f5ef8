"""Acceptance: an edit branches the conversation and reuses only the shared prefix."""

from __future__ import annotations

from mlxchat.chat import Message

from tests.commands.conftest import SYSTEM, finish, send

TEMPLATE_SLACK = 8
"""Tokens of the user turn's opening ('<|im_start|>user\\n') the two versions also share."""


def test_edit_of_the_first_message_reuses_only_the_system_prompt(registry, ctx, conv):
    first = send(conv, "Alpha: how do tides work?")
    assert first.stats.cache_source == "cold"
    old_leaf = conv.session.leaf_id
    system_tokens = conv.engine.prompts.message_tokens([Message("system", SYSTEM)])[0]

    result = registry.run("/edit Zulu: why is the sky blue?", ctx)
    assert result.ok and result.session_changed, result.text
    stats = finish(result).stats

    assert system_tokens <= stats.reused_tokens <= system_tokens + TEMPLATE_SLACK
    assert stats.prefilled_tokens == stats.prompt_tokens - stats.reused_tokens
    assert stats.miss_reason is not None and "edited" in stats.miss_reason
    assert next(m.content for m in conv.messages) == "Zulu: why is the sky blue?"

    branches = registry.run("/branch", ctx)
    leaves = {row[0]: row for row in branches.rows}
    assert f"#{old_leaf}" in leaves and "Alpha" in leaves[f"#{old_leaf}"][2]
    assert leaves[f"#{conv.session.leaf_id}"][-1] == "current"

    # A follow-up on the new branch is warm again: only its own tokens are prefilled.
    follow = send(conv, "And at sunset?")
    assert follow.stats.cache_source == "warm" and follow.stats.miss_reason is None
    assert follow.stats.prefilled_tokens < 40


def test_retry_reuses_everything_but_the_reply(registry, ctx, conv):
    first = send(conv, "Tell me a fact.")
    stats = finish(registry.run("/retry", ctx)).stats
    assert stats.prompt_tokens == first.stats.prompt_tokens
    assert stats.reused_tokens == stats.prompt_tokens - 1  # the last token is fed for logits
