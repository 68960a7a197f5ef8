"""The live KV cache: mlx-lm's cache objects plus what they hold and why.

Used only on the engine thread. Owns the rules for reusing, trimming and
quantizing the cache, so the turn never touches a cache object directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from mlxchat.chat import Message
from mlxchat.engine.kv import prompt_cache, room
from mlxchat.engine.kv.reuse import common_prefix, miss_reason
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.models.memory import KVLayout
from mlxchat.turn_stats import CacheSource


@dataclass
class Reuse:
    """What a turn may keep of the live cache."""

    tokens: int
    """Leading prompt tokens already in the cache (never the fed tail)."""
    reason: str | None
    """Why fewer tokens were kept than the cache held, or why it was reset."""
    source: CacheSource
    """Where the kept tokens came from ('cold' when none were kept)."""


class LiveCache:
    """The cache arrays, the token ids they hold, the conversation those tokens
    render, and where they came from (this process, a snapshot, nowhere)."""

    def __init__(self, model: Any):
        self.model = model
        self.layers: list[Any] = []
        self.tokens: list[int] = []
        self.conversation: list[tuple[str, str]] = []
        self.source: CacheSource = "cold"
        self._pending_reason: str | None = None
        self.ahead_from: int | None = None
        """Where the tokens prefilled while the user types start (None: none)."""
        self.ahead_s = 0.0
        """Seconds spent prefilling while the user typed, since the last turn."""
        self._empty_dtype = prompt_cache.activation_label(model)
        """What an empty cache will hold (a gauge's label before the first chunk)."""
        self.reset()

    # -- state -------------------------------------------------------------------
    @property
    def held_from(self) -> CacheSource:
        """Where the tokens held came from: 'typed' when typing prefill alone put
        them in a cold cache."""
        if not self.tokens:
            return "cold"
        return "typed" if self.source == "cold" else self.source

    @property
    def bits(self) -> int | None:
        return prompt_cache.bits(self.layers)

    @property
    def nbytes(self) -> int:
        return prompt_cache.kv_bytes(self.layers)

    @property
    def layout(self) -> KVLayout | None:
        """Its bytes per token by layer kind (None while empty)."""
        return room.layout(self.layers) if self.tokens else None

    @property
    def dtype_label(self) -> str:
        return prompt_cache.dtype_label(self.layers, self._empty_dtype)

    def reset(self, reason: str | None = None, *, report: bool = False) -> None:
        """Start cold. ``reason`` is reported by the next turn when tokens were
        lost, or always with ``report`` (a rejected snapshot held none yet)."""
        had = bool(self.tokens)
        self.layers = make_prompt_cache(self.model)
        self.tokens, self.conversation, self.source = [], [], "cold"
        self.ahead_from, self.ahead_s = None, 0.0
        self._pending_reason = reason if (had or report) else None
        mx.clear_cache()

    def adopt(self, layers: list[Any], tokens: list[int], conversation: Sequence[Message],
              source: CacheSource) -> None:
        """Make restored cache objects the live ones."""
        self.layers, self.tokens = layers, list(tokens)
        self._follow()
        self.conversation = [(m.role, m.content) for m in conversation]
        self.source, self._pending_reason = source, None
        self.ahead_from, self.ahead_s = None, 0.0

    def _follow(self) -> None:
        """Tell a model that keeps position state per cache (mRoPE) that new
        layer objects hold these tokens."""
        follow = getattr(self.model, "follow_tokens", None)
        if follow is not None:
            follow(self.layers, self.tokens)

    def take_reason(self) -> str | None:
        reason, self._pending_reason = self._pending_reason, None
        return reason

    # -- a turn's use of it ----------------------------------------------------------
    def match_bits(self, kv_bits: int | None, head_dim: int) -> str | None:
        """Bring the cache to ``kv_bits``: quantize a full-precision cache in place;
        going back to full precision (or between widths) starts cold."""
        current = self.bits
        if current == kv_bits:
            return None
        if kv_bits and current is None:
            self.layers = prompt_cache.quantize(self.layers, kv_bits, head_dim)
            self._follow()
            return None
        had = bool(self.tokens)
        self.reset()
        return "KV bit width changed" if had else None

    def reuse(self, fitted: FittedPrompt, messages: Sequence[Message], *, tail: int,
              kv_bits: int | None, head_dim: int) -> Reuse:
        """Trim the cache to the longest prefix it shares with the prompt, keeping
        the last ``tail`` tokens out (they are always fed, for the logits)."""
        reason = self.take_reason()
        source = self.held_from
        reason = self.match_bits(kv_bits, head_dim) or reason
        tokens = fitted.tokens
        shared = common_prefix(self.tokens, tokens)
        common = min(shared, len(tokens) - tail)
        if common < len(self.tokens):
            if not prompt_cache.trimmable(self.layers):
                self.reset()  # the cause, when known, says why the prefix differs
                why = reason or fitted.reason
                return Reuse(0, f"{why}; cache not trimmable" if why else "cache not trimmable",
                             "cold")
            # Text prefilled while typing and edited since is no miss.
            if shared < min(len(self.tokens), self.ahead_end):
                reason = (reason or fitted.reason
                          or miss_reason(self.conversation, fitted, messages, shared))
            self.trim_to(common)
        return Reuse(common, reason, source if common else "cold")

    def needs_restore(self, tokens: Sequence[int]) -> bool:
        """The cache holds tokens ``tokens`` does not, and cannot be trimmed
        back to them (a wrapped sliding window, a recurrent state)."""
        return (common_prefix(self.tokens, tokens) < len(self.tokens)
                and not prompt_cache.trimmable(self.layers))

    def trim_to(self, n: int) -> None:
        """Give back every token after the first ``n`` (a trimmable cache)."""
        trim_prompt_cache(self.layers, len(self.tokens) - n)
        del self.tokens[n:]

    def _sync_tokens(self) -> None:
        """Evaluate the arrays; cut the token list to what the cache holds."""
        mx.eval([c.state for c in self.layers])
        del self.tokens[prompt_cache.offset(self.layers):]

    def feed(self, model: Any, tokens: Sequence[int], *, logits: bool = False) -> Any:
        """Prefill ``tokens`` after what the cache holds, evaluated; with
        ``logits``, the model's logits at each of them, (tokens, vocabulary)."""
        out = model(mx.array(tokens)[None], cache=self.layers)
        mx.eval([c.state for c in self.layers], *([out] if logits else []))
        self.tokens.extend(tokens)
        return out[0] if logits else None

    def keep_prefix(self, tokens: Sequence[int]) -> int:
        """Trim a trimmable cache to the longest prefix it shares with
        ``tokens`` (a draft model's cache following the prompt); tokens kept."""
        common = common_prefix(self.tokens, tokens)
        if common < len(self.tokens):
            self.trim_to(common)
        return common

    @property
    def ahead_end(self) -> int:
        """Where the cache's turn-made tokens end (typed-ahead ones follow)."""
        return len(self.tokens) if self.ahead_from is None else self.ahead_from

    def typed_ahead(self, kept: int) -> tuple[int, float]:
        """Of ``kept`` reused tokens, those prefilled while typing, and the
        seconds typing prefill took; forgotten once a turn takes them."""
        typed = max(0, kept - self.ahead_end)
        seconds, self.ahead_from, self.ahead_s = self.ahead_s, None, 0.0
        return typed, seconds

    def extend_ahead(self, tokens: Sequence[int], floor: int) -> int | None:
        """Make the cache a prefix of ``tokens`` for typing prefill, trimming
        never below ``floor`` (the history's end); the index to feed from, or
        None to leave the cache alone."""
        shared = common_prefix(self.tokens, tokens)
        if shared < len(self.tokens):
            if shared < floor or not prompt_cache.trimmable(self.layers):
                return None  # the cache holds another conversation: the turn decides
            self.trim_to(shared)
        self.ahead_from = shared if self.ahead_from is None else min(self.ahead_from, shared)
        return shared

    def settle_ahead(self) -> None:
        """After a typing prefill (done or cancelled): evaluate, keep the token
        list to what the cache holds."""
        self._sync_tokens()

    def settle(self, conversation: Sequence[Message]) -> None:
        """After a turn (finished, cancelled or failed): evaluate the arrays, keep
        the token list to what the cache really holds, note what it renders."""
        self._sync_tokens()
        self.conversation = [(m.role, m.content) for m in conversation]


def compute_once(model: Any, ids: Sequence[int]) -> None:
    """Prefill ``ids`` but the last on a throwaway cache, then one greedy decode
    step (no sampler: the random state is left alone)."""
    if len(ids) < 2:
        return
    scratch = LiveCache(model)
    scratch.feed(model, ids[:-1])
    logits = model(mx.array(ids[-1:])[None], cache=scratch.layers)
    mx.eval(mx.argmax(logits[:, -1, :], axis=-1))
