"""What a cache and a prompt share, and words for why a cache could not be
reused (the miss reason a turn reports)."""

from __future__ import annotations

from typing import Sequence

from mlxchat.chat import Message
from mlxchat.engine.prompt.fit import FittedPrompt


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def first_difference(old: Sequence[tuple[str, str]], new: Sequence[Message]) -> int:
    """Index of the first message that differs between two conversations."""
    i = 0
    while i < min(len(old), len(new)) and old[i] == (new[i].role, new[i].content):
        i += 1
    return i


def miss_reason(previous: Sequence[tuple[str, str]], fitted: FittedPrompt,
                original: Sequence[Message], shared: int = 0) -> str:
    """Words for why the cache held tokens this turn could not reuse
    (``shared``: leading tokens the cache and the prompt still have in common)."""
    if fitted.dropped:
        return f"context overflow: dropped {fitted.dropped} oldest messages"
    k = first_difference(previous, original)
    if k == len(previous):
        if fitted.ledger:  # never re-rendered: the cache came from elsewhere
            return (f"the cached tokens differ from this conversation's from token {shared:,}"
                    " (a cache of another conversation)")
        return "template re-rendered an earlier turn"
    changed = previous[k]
    if changed[0] == "system" or (k < len(original) and original[k].role == "system"):
        return "system prompt changed"
    if k == 0:
        if shared:  # an edit of the first message, or another conversation
            return (f"the first message differs: trimmed back to the template's opening "
                    f"({shared:,} tokens)")
        return "another conversation: nothing in common with the cache"
    if k == len(original) and changed[0] == "assistant":
        return "reply retried: trimmed back to the branch point"
    return f"history edited at message {k + 1}: trimmed back to the branch point"
