"""Fitting a conversation to the context window: the prompt's tokens, and
what the context policy drops (or refuses) when they overflow it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from mlxchat.chat import Message
from mlxchat.engine.events import ContextOverflowError
from mlxchat.engine.prompt.render import render
from mlxchat.models.token_floor import least_tokens


@dataclass
class FittedPrompt:
    """The tokens of a turn's prompt and the conversation they hold."""

    tokens: list[int]
    messages: list[Message]
    dropped: int
    reason: str | None = None
    """Why the prompt does not extend the cached tokens, when the caller knows
    (a new token ledger); reported as the miss reason if the cache had more."""
    ledger: bool = False
    """The tokens are a token ledger (earlier turns as sent), not a fresh render."""


def reply_reserve(max_tokens: int, window: int) -> int:
    """Tokens kept free for the reply when deciding what fits (at most half the window)."""
    return max(1, min(max_tokens, window // 2))


def _newest_unit(messages: Sequence[Message]) -> int:
    """How many of the newest messages go together: trailing tool results with
    the reply that called them (a template may refuse results alone), else one."""
    n = 0
    while n < len(messages) and messages[-1 - n].role == "tool":
        n += 1
    if n and n < len(messages) and messages[-1 - n].role == "assistant":
        n += 1
    return max(n, 1) if messages else 0


def refuse_unfittable(tokenizer: Any, texts: Sequence[str], *, window: int) -> None:
    """ContextOverflowError, before any tokenizing, when ``texts`` (the
    newest messages) take at least the whole window, whatever the policy:
    a 15 MB message is refused in milliseconds instead of tokenized first."""
    floor = least_tokens(tokenizer, texts)
    if floor.tokens >= window:
        raise ContextOverflowError(
            f"This message is at least {floor.tokens:,} tokens ({floor.text_bytes:,} bytes; "
            f"no token of this model holds more than {floor.token_bytes}); the context window "
            f"is {window:,} tokens. Shorten it or attach less.")


def fit(tokenizer: Any, messages: Sequence[Message], *, window: int, max_tokens: int,
        policy: str, template_kwargs: dict[str, Any] | None = None) -> FittedPrompt:
    """Render ``messages``; when they overflow the window apply ``policy``.

    ``drop_oldest`` removes the oldest non-system messages (keeping the newest
    one, or the newest tool results with the reply that called them) until the
    prompt plus the reply reserve fits; ``stop`` refuses.
    """
    messages = list(messages)
    newest = messages[len(messages) - _newest_unit(messages):]
    refuse_unfittable(tokenizer, [m.content for m in newest if m.role != "assistant"],
                      window=window)
    kw = template_kwargs or {}
    reserve = reply_reserve(max_tokens, window)
    tokens = render(tokenizer, messages, **kw)
    if len(tokens) + reserve <= window:
        return FittedPrompt(tokens, messages, 0)
    system = [m for m in messages[:1] if m.role == "system"]
    rest = messages[len(system):]
    unit = _newest_unit(rest)
    minimal = render(tokenizer, system + rest[-unit:], **kw)
    if len(minimal) >= window:
        size = len(render(tokenizer, rest[-unit:], generation_prompt=False, **kw)) \
            if rest else 0
        what = "These tool results (with the call) are" if unit > 1 else "This message is"
        raise ContextOverflowError(
            f"{what} {size:,} tokens (the prompt with them {len(minimal):,}); "
            f"the context window is {window:,} tokens. Shorten it or attach less.")
    if policy == "stop":
        raise ContextOverflowError(
            f"The conversation needs {len(tokens):,} tokens plus {reserve:,} for the reply; "
            f"the context window is {window:,}. Start a /new session, "
            "`/set context_policy drop_oldest`, or lower max_tokens.")
    dropped = 0
    while len(rest) > unit and len(tokens) + reserve > window:
        # Cut up to the next user message so the history never starts with a
        # reply or a tool result (the newest unit aside).
        cut = 1
        while cut < len(rest) - unit and rest[cut].role != "user":
            cut += 1
        rest = rest[cut:]
        dropped += cut
        tokens = render(tokenizer, system + rest, **kw)
    return FittedPrompt(tokens, system + rest, dropped)
