"""Prefill while the user types: what a message being written will surely add.

The history plus the typed text up to its last whitespace, without the
template's end-of-message tokens, is what the message's ids will start with
(a word can still grow, a finished one cannot); the engine prefills it as a
job any send supersedes.
"""

from __future__ import annotations

from typing import Callable

from mlxchat.chat import Attachment
from mlxchat.engine.interface import Engine
from mlxchat.engine.kv.reuse import common_prefix
from mlxchat.errors import MlxchatError
from mlxchat.session.current import OpenSession
from mlxchat.session.pins import PinnedDocs

#: Appended to the cut text to find where its content ends in the message's ids.
SENTINEL = " x"


def settled_text(text: str) -> str:
    """``text`` up to its last whitespace (that whitespace left out)."""
    for i in range(len(text) - 1, -1, -1):
        if text[i].isspace():
            return text[:i].rstrip()
    return ""


class TypingAhead:
    """Prefills the message being typed, as a job any send supersedes."""

    def __init__(self, open_session: OpenSession, engine: Engine, pins: PinnedDocs, *,
                 attachments: list[Attachment], turns_started: Callable[[], int]):
        self._open = open_session
        self._engine = engine
        self._pins = pins
        self._attachments = attachments
        """The conversation's pending attachments (the same list, read at each call)."""
        self._turns_started = turns_started
        """Turns the conversation started: a prefill planned before one is stale."""

    def typed_tokens(self, text: str) -> list[int] | None:
        """The prompt tokens sending a message that starts with ``text`` will
        surely begin with, or None when the token ledger cannot be used."""
        planned = self._typed_plan(text)
        return None if planned is None else planned[0]

    def _typed_plan(self, text: str) -> tuple[list[int], int] | None:
        """The tokens to prefill and where the history in them ends."""
        settings = self._open.generation
        if settings.history == "template" or settings.docs is not None:
            # Retrieved sources go in front of the message: unknown until it is sent.
            return None
        cut = settled_text(text)
        blocks = [a.block for a in self._attachments]
        content = "\n\n".join(blocks + [cut]) if cut else "\n\n".join(blocks)
        if not content.strip():
            return None
        ledger = self._open.ledger(self._engine)
        messages = self._open.messages
        try:
            plans = [ledger.plan_message(messages, content + extra)
                     for extra in ("", SENTINEL)]
        except MlxchatError:
            return None  # too long, or a template that cannot be split: the send decides
        if not all(p.prompt.ledger for p in plans):
            return None
        a, b = (p.prompt.tokens for p in plans)
        history = len(a) - len(plans[0].user_ids or ())
        return a[:common_prefix(a, b)], history

    def prefill_typed(self, text: str) -> int:
        """Prefill what sending ``text`` (and pending attachments) will surely
        add; returns the tokens the cache holds from typing prefill (0 when
        nothing was done). Blocks until done or superseded by a send."""
        seen = self._turns_started()
        planned = self._typed_plan(text)
        if planned is None:
            return 0
        tokens, history = planned
        self._pins.prepare(tokens)
        try:
            return self._engine.prefill(tokens, self._open.generation, floor=history,
                                        current=lambda: self._turns_started() == seen)
        finally:
            self._pins.keep()
