"""How many tokens a text takes at least, known before it is tokenized.

No token of a vocabulary covers more than its longest entry's bytes of the
text, so a text of B bytes takes at least B / L tokens. That holds only for
a tokenizer that drops nothing: byte-level BPE (every byte is in some token)
or BPE with byte fallback, with pre-tokenizers that keep every character.
For any other tokenizer no floor is claimed (0): a refusal from this floor
is never wrong. Bytes are counted after the tokenizer's own normalizer (NFC
can shrink text), SentencePiece's "▁" counted as the space it stands for,
and after stripping (templates ``trim`` message text).

``tokens_at_least`` counts for real, in pieces, stopping once a limit is
passed: a text that passes the floor but not the window is refused with
bounded memory and time, and off the engine's thread.
"""

from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass
from typing import Any, Iterable

KEEPING_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Split", "Digits", "Punctuation",
                          "UnicodeScripts"}
"""Pre-tokenizers that split text but keep every character of it (Split and
Punctuation unless their behaviour is 'removed')."""
BYTE_FALLBACK = re.compile(r"<0x[0-9A-Fa-f]{2}>")
PIECE_CHARS = 64 * 1024
PIECE_MARGIN = 4
"""Tokens a piece's own count may exceed its share of the whole's, at its
cut (none when it is cut after a newline, as every chat regex splits there)."""


@dataclass(frozen=True)
class TokenFloor:
    tokens: int
    """At least this many tokens (0: nothing can be claimed for this tokenizer)."""
    text_bytes: int
    token_bytes: int
    """The most bytes of text one token of the vocabulary covers (0: unknown)."""


def backend(tokenizer: Any) -> Any | None:
    """The ``tokenizers.Tokenizer`` under mlx-lm's and transformers' wrappers."""
    from tokenizers import Tokenizer

    found = tokenizer
    for _ in range(4):
        if isinstance(found, Tokenizer):
            return found
        found = next((getattr(found, a) for a in ("backend_tokenizer", "_tokenizer")
                      if getattr(found, a, None) is not None), None)
    return None


def _keeps_everything(step: dict | None) -> bool:
    if step is None:
        return True
    kind = step.get("type")
    if kind == "Sequence":
        return all(_keeps_everything(s) for s in step.get("pretokenizers", []))
    return kind in KEEPING_PRE_TOKENIZERS and step.get("behavior", "").lower() != "removed"


def _has_byte_level(step: dict | None) -> bool:
    if step is None:
        return False
    if step.get("type") == "Sequence":
        return any(_has_byte_level(s) for s in step.get("pretokenizers", []))
    return step.get("type") == "ByteLevel"


def _covered(token: str, byte_level: bool) -> int:
    """Bytes of text ``token`` can stand for."""
    if byte_level:
        return len(token)  # one character of the byte alphabet per byte
    if BYTE_FALLBACK.fullmatch(token):
        return 1
    return len(token.replace("\u2581", " ").encode("utf-8"))


_longest: dict[int, tuple[Any, int]] = {}
_lock = threading.Lock()


def longest_token_bytes(tokenizer: Any) -> int:
    """The most bytes of text one token covers, or 0 when the tokenizer may
    drop text (then no floor holds). Read from the vocabulary once per tokenizer."""
    found = backend(tokenizer)
    if found is None:
        return 0
    with _lock:
        if id(found) in _longest and _longest[id(found)][0] is found:
            return _longest[id(found)][1]
    spec = json.loads(found.to_str())
    model, pre = spec.get("model") or {}, spec.get("pre_tokenizer")
    byte_level = _has_byte_level(pre)
    whole = model.get("type") == "BPE" and _keeps_everything(pre) \
        and (byte_level or bool(model.get("byte_fallback")))
    longest = 0
    if whole:
        vocab = found.get_vocab(with_added_tokens=False)
        added = [t.get("content", "") for t in spec.get("added_tokens") or []]
        longest = max([_covered(t, byte_level) for t in vocab]
                      + [len(t.encode("utf-8")) for t in added] + [1])
    with _lock:
        _longest[id(found)] = (found, longest)
    return longest


def _measured(tokenizer: Any, text: str) -> int:
    """The text's bytes as the tokenizer's model sees them (after its normalizer)."""
    text = text.strip()
    normalizer = getattr(backend(tokenizer), "normalizer", None)
    if normalizer is not None and text:
        text = normalizer.normalize_str(text).strip()
    return len(text.replace("\u2581", " ").encode("utf-8", "surrogatepass"))


def least_tokens(tokenizer: Any, texts: Iterable[str]) -> TokenFloor:
    """The tokens ``texts`` take at least, together, wherever they sit in a
    prompt (a token spanning two of them still covers at most its bytes)."""
    per_token = longest_token_bytes(tokenizer)
    if not per_token:
        return TokenFloor(0, 0, 0)
    size = sum(_measured(tokenizer, t) for t in texts)
    return TokenFloor(math.ceil(size / per_token), size, per_token)


def _pieces(text: str) -> Iterable[str]:
    """``text`` in pieces of about PIECE_CHARS, cut after a newline followed by
    a non-space where there is one (a boundary every chat regex splits at),
    else before a space, else anywhere."""
    at = 0
    while at < len(text):
        end = min(len(text), at + PIECE_CHARS)
        if end < len(text):
            window = text[at + PIECE_CHARS // 2:end]
            cut = max((m.end() for m in re.finditer(r"\n(?=\S)", window)), default=-1)
            if cut < 0:
                cut = window.rfind(" ")
            if cut > 0:
                end = at + PIECE_CHARS // 2 + cut
        yield text[at:end]
        at = end


def tokens_at_least(tokenizer: Any, text: str, *, limit: int) -> int:
    """Tokens ``text`` takes at least, counted a piece at a time and stopped
    once past ``limit`` (so a huge text costs what ``limit`` tokens cost)."""
    found = backend(tokenizer)  # its encode shares nothing mutable between threads
    encode = (lambda t: found.encode(t, add_special_tokens=False).ids) if found is not None \
        else (lambda t: tokenizer.encode(t, add_special_tokens=False))
    counted = 0
    for piece in _pieces(text.strip()):
        counted += max(0, len(encode(piece)) - PIECE_MARGIN)
        if counted > limit:
            break
    return counted
