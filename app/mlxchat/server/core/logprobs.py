"""Sampled tokens' log-probabilities in OpenAI's two shapes: a chat choice's
``logprobs.content`` (each token's text, bytes, log-probability and top
alternatives) and a legacy completion's ``logprobs`` (``tokens``,
``token_logprobs``, ``top_logprobs``, ``text_offset``)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Sequence

from mlx_lm.tokenizer_utils import _byte_decoder

from mlxchat.engine.events import TokenLogprob
from mlxchat.engine.prompt.jinja import hf_tokenizer

_SPM_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenTexts:
    """A tokenizer's tokens as bytes and as the text OpenAI shows for them
    (``bytes:\\xe2\\x80`` for a token that is part of a character)."""

    def __init__(self, tokenizer: Any):
        self._hf = hf_tokenizer(tokenizer)
        self._kind = type(getattr(tokenizer, "detokenizer", None)).__name__
        self._added = set(getattr(self._hf, "added_tokens_decoder", {}) or {})
        self.bytes = lru_cache(maxsize=65536)(self._bytes)

    def _bytes(self, token: int) -> bytes:
        piece = self._hf.convert_ids_to_tokens(int(token))
        if piece is None:
            return b""
        if token in self._added:
            return piece.encode()
        if self._kind == "BPEStreamingDetokenizer":  # GPT-2's printable stand-ins
            table = _byte_decoder()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece)
        if self._kind == "SPMStreamingDetokenizer":
            found = _SPM_BYTE.fullmatch(piece)
            if found:
                return bytes([int(found.group(1), 16)])
            return piece.replace("\u2581", " ").encode()
        return self._hf.decode([int(token)]).encode()

    def width(self, token: int) -> int:
        """Characters the token adds to a text (a part of one counts as one)."""
        return len(self.bytes(token).decode("utf-8", errors="replace"))

    def text(self, token: int) -> str:
        raw = self.bytes(token)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def chat_content(entries: Sequence[TokenLogprob], texts: TokenTexts) -> list[dict[str, Any]]:
    """A chat choice's ``logprobs.content``."""
    def one(token: int, logprob: float) -> dict[str, Any]:
        return {"token": texts.text(token), "logprob": logprob,
                "bytes": list(texts.bytes(token))}
    return [{**one(e.token, e.logprob), "top_logprobs": [one(t, lp) for t, lp in e.top]}
            for e in entries]


def chat_logprobs(entries: Sequence[TokenLogprob] | None, texts: TokenTexts
                  ) -> dict[str, Any] | None:
    """A chat choice's ``logprobs`` (None: not asked for)."""
    if entries is None:
        return None
    return {"content": chat_content(entries, texts), "refusal": None}


def legacy(entries: Sequence[TokenLogprob | None], texts: TokenTexts, *,
           offset: int = 0) -> dict[str, Any]:
    """A completion choice's ``logprobs``: ``offset`` is where the first token's
    text starts in the choice's text (after an echoed prompt); an entry of None
    (a prompt's first token) has no figures."""
    out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                           "text_offset": []}
    for e in entries:
        if e is None:
            continue
        out["tokens"].append(texts.text(e.token))
        out["token_logprobs"].append(e.logprob)
        out["top_logprobs"].append({texts.text(t): lp for t, lp in e.top})
        out["text_offset"].append(offset)
        offset += texts.width(e.token)
    return out


def with_first(prompt: Sequence[TokenLogprob | None], texts: TokenTexts,
               first_token: int) -> dict[str, Any]:
    """An echoed prompt's figures, its first token's null as OpenAI writes them."""
    rest = legacy(prompt[1:], texts, offset=texts.width(first_token))
    return {"tokens": [texts.text(first_token), *rest["tokens"]],
            "token_logprobs": [None, *rest["token_logprobs"]],
            "top_logprobs": [None, *rest["top_logprobs"]],
            "text_offset": [0, *rest["text_offset"]]}
