"""What a compaction of a branch summarizes and what it keeps.

The newest messages are kept in full: those that fit an eighth of the window
(``KEEP_SHARE``) when the compaction is prepared, at least the last user
message and what followed it, starting at a user message that follows a
reply; every message added before the switch is kept too. Everything the
model sees before them (an earlier summary included) is what the summary
stands for. The system part and pinned documents are never in it: they stay
in front of the compacted conversation as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from mlxchat.chat import Message, latest_summary

KEEP_SHARE = 8
"""The newest messages kept in full take about this fraction (1/8) of the window."""


@dataclass(frozen=True)
class CompactPlan:
    """A compaction of one branch, as chosen when it was prepared."""

    first: int
    """Index in the branch of the first message kept in full (a user message)."""
    prefix: tuple[int | None, ...]
    """Ids of the branch's messages up to and including ``first``: the plan
    holds while the branch starts with them."""
    summarized: int
    """Messages of the conversation the summary stands for."""
    earlier: str | None
    """The summary in effect before (it is summarized again with the rest)."""
    messages: list[Message]
    """The messages the summary is written from (in the model's view, before ``first``)."""

    def holds_for(self, branch: Sequence[Message]) -> bool:
        return (len(branch) > self.first
                and tuple(m.id for m in branch[:self.first + 1]) == self.prefix)


def _ledger_floor(branch: Sequence[Message]) -> int:
    """Where the first message kept may start at the earliest: at the newest
    ledger start that is not a summary (the messages after it carry their own
    ids, which a compacted ledger goes on with)."""
    return max((i for i, m in enumerate(branch) if m.ledger_start and m.role != "summary"),
               default=0)


def plan_compaction(branch: Sequence[Message], *, window: int,
                    count: Callable[[Message], int] = lambda m: len(m.token_ids or ())
                    ) -> CompactPlan | str:
    """The compaction of ``branch`` to prepare now, or why there is none;
    ``count``: the tokens a message takes (its ledger ids, where it has them)."""
    at = latest_summary(branch)
    view_start = at - branch[at].compaction.kept if at is not None else 0  # type: ignore[union-attr]
    floor = max(_ledger_floor(branch), view_start + 1)
    keep = window // KEEP_SHARE
    candidates = [i for i in range(floor, len(branch))
                  if branch[i].role == "user" and branch[i - 1].role in ("assistant", "summary")]
    if not candidates:
        return "nothing to summarize yet: the conversation is one exchange since its start"
    first = candidates[-1]
    for i in reversed(candidates):
        if sum(count(m) for m in branch[i:] if m.role != "summary") > keep:
            break
        first = i
    earlier = branch[at].content if at is not None else None
    messages = [m for m in branch[view_start:first] if m.role != "summary"]
    summarized = sum(1 for m in branch[:first] if m.role != "summary")
    return CompactPlan(first, tuple(m.id for m in branch[:first + 1]), summarized, earlier,
                       messages)
