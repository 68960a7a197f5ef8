"""New messages that overflow the window under ``context_policy compact``:
planned again after the branch's compaction (``Compactor.at_overflow``), once
more when the messages the first one kept leave them no room, or as the
fallback (the oldest messages left out) planned them, and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from mlxchat.chat import Message
from mlxchat.session.compactor import Compactor
from mlxchat.session.current import OpenSession
from mlxchat.session.ledger import Plan

MAX_SWITCHES = 2
"""Compactions one message may switch to: a second when the messages the first
kept (all those sent while it was prepared) leave the new one no room."""


@dataclass(frozen=True)
class WindowFit:
    """The plan for a turn's new messages and what the window did for it."""

    plan: Plan
    note: str | None
    """What made room (``TurnStats.compaction``): the compactions switched to,
    or why the oldest messages were left out instead; None when it fitted."""
    switched: Message | None
    """The newest summary switched to (None: no compaction)."""


def fit_window(plan_for: Callable[[list[Message]], Plan], open_session: OpenSession,
               compactor: Compactor) -> WindowFit:
    """``plan_for(branch)`` for the open branch, compacted where it overflows."""
    plan = plan_for(open_session.messages)
    settings = open_session.generation
    if settings.context_policy != "compact" or settings.history != "ledger":
        return WindowFit(plan, None, None)
    notes: list[str] = []
    switched: Message | None = None
    for _ in range(MAX_SWITCHES):
        if not plan.overflow:
            break
        done, note = compactor.at_overflow()
        if done is None:
            notes.append(note + ": the oldest messages were left out instead")
            break
        notes.append(note)
        switched = open_session.messages[-1]
        plan = plan_for(open_session.messages)
    else:
        if plan.overflow:
            notes.append("still past the window: the oldest messages were left out too")
    return WindowFit(plan, "; ".join(notes) or None, switched)
