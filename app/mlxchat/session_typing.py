"""Prefill while the user types: what a message being written will surely add.

The history plus the typed text up to its last whitespace, without the
template's end-of-message tokens, is what the message's ids will start with
(a word can still grow, a finished one cannot); the engine prefills it as a
job any send supersedes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlxchat.chat import GenerationSettings, Message, TurnStats, attachment_block
from mlxchat.engine.prompt import common_prefix
from mlxchat.errors import MlxchatError

if TYPE_CHECKING:
    from mlxchat.engine.interface import Engine
    from mlxchat.ledger import Ledger

#: Appended to the cut text to find where its content ends in the message's ids.
SENTINEL = " x"


def settled_text(text: str) -> str:
    """``text`` up to its last whitespace (that whitespace left out)."""
    for i in range(len(text) - 1, -1, -1):
        if text[i].isspace():
            return text[:i].rstrip()
    return ""


class TypingAhead:
    """Mixed into ``Conversation``."""

    engine: Engine
    attachments: list  # of conversation.Attachment
    turns_started = 0
    """Turns this conversation started: a prefill planned before one is stale."""

    if TYPE_CHECKING:  # defined by Conversation
        @property
        def messages(self) -> list[Message]: ...

        @property
        def generation(self) -> GenerationSettings: ...

        def _ledger(self) -> Ledger: ...

        def _prepare_prefix(self, tokens: list[int]) -> None: ...

        def _keep_prefix(self, stats: TurnStats | None = None) -> None: ...

    def typed_tokens(self, text: str) -> list[int] | None:
        """The prompt tokens sending a message that starts with ``text`` will
        surely begin with, or None when the token ledger cannot be used."""
        planned = self._typed_plan(text)
        return None if planned is None else planned[0]

    def _typed_plan(self, text: str) -> tuple[list[int], int] | None:
        """The tokens to prefill and where the history in them ends."""
        if self.generation.history == "template":
            return None
        cut = settled_text(text)
        blocks = [attachment_block(a.path.name, a.text) for a in self.attachments]
        content = "\n\n".join(blocks + [cut]) if cut else "\n\n".join(blocks)
        if not content.strip():
            return None
        ledger = self._ledger()
        try:
            plans = [ledger.plan_message(self.messages, content + extra)
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
        seen = self.turns_started
        planned = self._typed_plan(text)
        if planned is None:
            return 0
        tokens, history = planned
        self._prepare_prefix(tokens)
        try:
            return self.engine.prefill(tokens, self.generation, floor=history,
                                       current=lambda: self.turns_started == seen)
        finally:
            self._keep_prefix()
