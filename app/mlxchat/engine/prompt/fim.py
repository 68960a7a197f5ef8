"""Fill in the middle: a prompt that gives the text before and after a gap,
for models trained with the prefix-suffix-middle tokens (StarCoder's and
Qwen2.5-Coder's spellings, DeepSeek-Coder's, Code Llama's), in that order."""

from __future__ import annotations

from typing import Any

from mlxchat.engine.prompt.control import added_tokens, encode_plain

SPELLINGS = (
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    ("▁<PRE>", "▁<SUF>", "▁<MID>"),
)
"""Each family's (prefix, suffix, middle) tokens."""


def fim_tokens(tokenizer: Any) -> tuple[int, int, int] | None:
    """The tokenizer's prefix, suffix and middle token ids, or None."""
    vocab = {**tokenizer.get_vocab(), **added_tokens(tokenizer)}
    for spelling in SPELLINGS:
        if all(t in vocab for t in spelling):
            pre, suf, mid = (vocab[t] for t in spelling)
            return pre, suf, mid
    return None


def fim_ids(tokenizer: Any, prefix: str, suffix: str) -> list[int] | None:
    """The prompt whose continuation fills the gap between ``prefix`` and
    ``suffix`` (both plain text), or None when the model has no such tokens."""
    found = fim_tokens(tokenizer)
    if found is None:
        return None
    pre, suf, mid = found
    return [pre, *encode_plain(tokenizer, prefix, at_start=False), suf,
            *encode_plain(tokenizer, suffix, at_start=False), mid]
