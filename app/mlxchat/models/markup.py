"""How a tokenizer marks reasoning in a reply: think tags (found by mlx-lm's
tokenizer wrapper, ``has_thinking``) or gpt-oss harmony channels."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

_HARMONY = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>")
FINAL = "<|start|>assistant<|channel|>final<|message|>"
CALL_HEAD = "<|start|>assistant to="
CALL_END = "<|call|>"
"""A gpt-oss tool call is kept in a reply's text as its template renders one:
CALL_HEAD + 'functions.NAME<|channel|>commentary json<|message|>' + ARGS + CALL_END."""


def call_start(recipient: str) -> str:
    """The head of a gpt-oss call to ``recipient``, as its template writes it."""
    return f"{CALL_HEAD}{recipient}<|channel|>commentary json<|message|>"


def _vocab(tokenizer: Any) -> dict[str, int]:
    try:
        return dict(tokenizer.get_vocab())
    except (AttributeError, TypeError):
        return {}


@dataclass(frozen=True)
class Markup:
    """How a tokenizer marks reasoning; built once per tokenizer."""

    kind: Literal["none", "think", "harmony"] = "none"
    start: tuple[int, ...] = ()
    end: tuple[int, ...] = ()
    channel: int = -1
    message: int = -1
    turn_start: int = -1
    turn_end: int = -1
    call: int = -1
    """gpt-oss: the token that ends a tool call (an end token of the turn)."""
    final: tuple[int, ...] = ()
    """gpt-oss: '<|start|>assistant<|channel|>final<|message|>', how its
    template opens the answer (what closes reasoning when its budget is spent)."""

    @property
    def reasons(self) -> bool:
        return self.kind != "none"


def markup_of(tokenizer: Any) -> Markup:
    """Harmony when the vocabulary has its channel tokens, else the think tags
    mlx-lm's wrapper found, else none."""
    vocab = _vocab(tokenizer)
    if all(t in vocab for t in _HARMONY):
        channel, message, start, end = (vocab[t] for t in _HARMONY)
        final = tuple(tokenizer.encode(FINAL, add_special_tokens=False))
        return Markup("harmony", channel=channel, message=message, turn_start=start,
                      turn_end=end, call=vocab.get("<|call|>", -1), final=final)
    if getattr(tokenizer, "has_thinking", False):
        start = tuple(getattr(tokenizer, "think_start_tokens", None) or ())
        end = tuple(getattr(tokenizer, "think_end_tokens", None) or ())
        if start and end:
            return Markup("think", start=start, end=end)
    return Markup()


@lru_cache(maxsize=8)
def cached_markup(tokenizer: Any) -> Markup:
    return markup_of(tokenizer)
