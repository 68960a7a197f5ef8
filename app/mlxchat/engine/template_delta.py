"""What one message adds to the token sequence, rendered once and never again.

Real chat templates re-render history (Llama 3 stamps today's date, Qwen3
strips earlier reasoning, Mistral moves the system prompt to the newest user
turn), so rendering the whole conversation each turn changes tokens the KV
cache already holds. Here a new user message is rendered after a fixed stub
exchange, and only the tokens it adds are kept: the template's own closing of
the previous reply, the user turn and the generation prompt.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from mlxchat.chat import Message
from mlxchat.engine import prompt
from mlxchat.engine.events import EngineError

_STUB_USER = "Stub question for the token ledger."
# Two replies that end in different tokens: their renders share only the closing.
_STUB_REPLIES = ("First stub answer, one.", "Another reply 2")


class TemplateNotIncremental(EngineError):
    """The template renders an earlier turn differently once a message follows it."""


@dataclass(frozen=True)
class TemplateOptions:
    """What a session fixes for every render of its template."""

    date: float | None = None
    """Unix time whose date templates stamp (Llama 3): the session's start."""
    enable_thinking: bool | None = None
    """Passed to templates that take it (Qwen3); None keeps the template's default."""
    reasoning_effort: str | None = None
    """'low', 'medium' or 'high' for templates that take it (gpt-oss)."""

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.date is not None:
            day = dt.datetime.fromtimestamp(self.date)
            out["date_string"] = day.strftime("%d %b %Y")
            out["strftime_now"] = day.strftime  # shadows the template global
        if self.enable_thinking is not None:
            out["enable_thinking"] = self.enable_thinking
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        return out


def _special_ids(tokenizer: Any) -> frozenset[int]:
    ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
    ids.update(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    return frozenset(int(i) for i in ids)


def _stub(reply: str) -> list[Message]:
    return [Message("user", _STUB_USER), Message("assistant", reply)]


@lru_cache(maxsize=16)
def _stub_render(tokenizer: Any, options: TemplateOptions) -> tuple[int, ...]:
    return tuple(prompt.render(tokenizer, _stub(_STUB_REPLIES[0]), generation_prompt=False,
                               **options.kwargs()))


@lru_cache(maxsize=16)
def _closing(tokenizer: Any, options: TemplateOptions) -> tuple[int, ...]:
    """Tokens the template puts after a reply's text (e.g. ``<|im_end|>`` and a newline)."""
    a, b = (prompt.render(tokenizer, _stub(r), generation_prompt=False, **options.kwargs())
            for r in _STUB_REPLIES)
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return tuple(a[len(a) - n:])


def head(tokenizer: Any, system: str | None, text: str, options: TemplateOptions
         ) -> list[int]:
    """The first user message: everything the template puts before the reply
    (begin-of-text, system block, the message, the generation prompt)."""
    messages = ([Message("system", system)] if system else []) + [Message("user", text)]
    return prompt.render(tokenizer, messages, **options.kwargs())


def follow_up(tokenizer: Any, text: str, *, previous: Sequence[int],
              options: TemplateOptions) -> list[int]:
    """A user message after a reply whose token ids are ``previous``: the
    template's closing of that reply (less its end token when the model
    generated one), the user turn and the generation prompt."""
    before = list(_stub_render(tokenizer, options))
    after = prompt.render(tokenizer, _stub(_STUB_REPLIES[0]) + [Message("user", text)],
                          **options.kwargs())
    if after[:len(before)] != before:
        raise TemplateNotIncremental("the chat template re-renders the previous reply")
    closing = list(_closing(tokenizer, options))
    ended = bool(previous) and previous[-1] in set(tokenizer.eos_token_ids)
    if ended and closing and closing[0] in _special_ids(tokenizer):
        closing = closing[1:]  # the generated end token stands for the template's
    return closing + after[len(before):]
