"""The measured figures of one turn, as a reply stores them (stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mlxchat.record import Record

CacheSource = Literal["warm", "snapshot", "cold", "typed"]
"""Where a turn's reused tokens came from: the live cache of earlier turns, a
snapshot file, nowhere (none reused), or typing prefill alone (the cache held
nothing else: a first message typed ahead)."""
CACHE_SOURCE_WORDS = {
    "warm": "warm cache",
    "snapshot": "from snapshot",
    "cold": "cold start",
    "typed": "prefilled while typing",
}
NEW_CONVERSATION = "a new conversation (the cache held another)"
"""The miss reason of a conversation's first message when the cache held
another conversation: expected, not a fault."""


@dataclass
class TurnStats(Record):
    """Measured figures of one turn; every number is read, none estimated."""

    ttft_s: float = 0.0
    """Seconds from the start of the turn to the first generated token; 0.0
    when no token came (``first_token_s`` is None then: show that one)."""
    prefill_tps: float | None = None
    """Prompt tokens processed per second (prefilled tokens only); None when
    nothing was timed: no token came, or only the one token the first decode
    step feeds was computed (a fully warm turn)."""
    decode_tps: float | None = None
    """Generated tokens per second after the first; None for a reply of one
    token (no interval to measure)."""
    prompt_tokens: int = 0
    """Tokens of the rendered conversation sent to the model this turn."""
    generated_tokens: int = 0
    """Tokens sampled: reasoning, answer and the end token."""
    reasoning_tokens: int = 0
    """Of generated_tokens, those of the reasoning (its markup included)."""
    reasoning_s: float = 0.0
    """Seconds spent reasoning, from the start of sampling."""
    reasoning_budget_closed: bool = False
    """max_reasoning_tokens was spent: the reasoning was closed with the family's
    markup (counted in generated and reasoning tokens) and the answer followed."""
    finish_reason: str = "stop"
    """'stop' (end-of-turn token), 'length' (max_tokens or the window), 'cancelled', 'error'."""
    window_full: bool = False
    """The context window ended the reply (finish_reason 'length'), not max_tokens."""
    context_used: int = 0
    """Tokens in the KV cache after the turn."""
    context_window: int = 0
    kv_bytes: int = 0
    """Bytes the KV cache holds for its used length, summed from its arrays."""
    kv_bits: int | None = None
    """KV cache bit width; None for the model's own dtype (16 or 32 bit)."""
    weights_bytes: int = 0
    peak_memory_bytes: int = 0
    cache_source: CacheSource = "cold"
    """Where the reused prefix came from: the live cache, a snapshot file, or nowhere."""
    reused_tokens: int = 0
    """Of prompt_tokens, those already in the cache (typed_prefill_tokens included)."""
    prefilled_tokens: int = 0
    """Of prompt_tokens, those this turn computed (after Enter)."""
    typed_prefill_tokens: int = 0
    """Of reused_tokens, those prefilled while the user typed the message."""
    typed_prefill_s: float = 0.0
    """Seconds the engine spent prefilling while the user typed (not in ttft_s)."""
    model: str = ""
    """The model that wrote the reply ('smollm2-135m'), as the engine named it."""
    model_quantization: str = ""
    """How its weights were held ('int4 g32', 'bfloat16'), as the gauges say it."""
    miss_reason: str | None = None
    """Why fewer tokens were reused than the conversation shares with the cache."""
    dropped_messages: int = 0
    """Oldest messages left out to fit the context window."""
    compaction: str | None = None
    """How the window made room for this turn under context_policy compact: the
    compaction switched to, or why the oldest messages were left out instead."""
    total_s: float = 0.0
    spec_mode: str = "off"
    """How tokens were proposed: 'off', 'draft' (a draft model) or 'lookup'."""
    spec_off_reason: str | None = None
    """Why speculation was off this turn though the settings asked for it (a
    reply that follows a schema); None otherwise."""
    draft_tokens_proposed: int = 0
    draft_tokens_accepted: int = 0
    """Of the proposed tokens, those the model confirmed (each saves a pass)."""
    target_passes: int = 0
    """Forward passes of the model while decoding (one per verified proposal)."""
    draft_prefilled_tokens: int = 0
    """Tokens the draft model's cache computed this turn to follow the prompt."""
    draft_rebuilt: bool = False
    """The draft's cache was rebuilt from the prompt's token ids (after a resume
    from disk or a model change: the draft's cache is not saved)."""
    blas: str = ""
    """The BLAS serving MLX's float matmuls ('OpenBLAS 0.3.21, 2 threads')."""
    cpu_matmul: str = ""
    """How the quantized layers multiplied on the CPU (engine/cpu_choice.py)."""

    def __post_init__(self) -> None:
        # Rows stored before the rates could be None say 0.0 for "not measured":
        # a measured rate is never 0, so read those as None.
        if not self.prefill_tps:
            self.prefill_tps = None
        if not self.decode_tps:
            self.decode_tps = None

    @property
    def first_token_s(self) -> float | None:
        """The time to the first token, None when none came (stopped during the
        prefill): a turn without a token has no such figure."""
        return self.ttft_s if self.generated_tokens and self.ttft_s else None

    @property
    def source_words(self) -> str:
        """Where the reused tokens came from, in words ('warm cache')."""
        return CACHE_SOURCE_WORDS.get(self.cache_source, self.cache_source)

    @property
    def new_conversation(self) -> bool:
        """The cache held another conversation before this first message."""
        return bool(self.miss_reason) and self.miss_reason.startswith(NEW_CONVERSATION)

    @property
    def miss_words(self) -> str | None:
        """The miss reason as shown ('miss: system prompt changed'); a new
        conversation is said as one, not as a miss."""
        if not self.miss_reason:
            return None
        return self.miss_reason if self.new_conversation else f"miss: {self.miss_reason}"

    @property
    def acceptance(self) -> float:
        """Fraction of proposed tokens accepted (0 when none were proposed)."""
        return self.draft_tokens_accepted / self.draft_tokens_proposed \
            if self.draft_tokens_proposed else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Generated tokens per forward pass of the model (1.0 without speculation)."""
        return self.generated_tokens / self.target_passes if self.target_passes else 0.0

    @property
    def answer_tokens(self) -> int:
        """Tokens of the answer (the end token included): generated less reasoning."""
        return self.generated_tokens - self.reasoning_tokens

    @property
    def ending(self) -> str:
        """Why the reply ended, in words ('stopped by max_tokens')."""
        if self.finish_reason == "length":
            return ("stopped by the context window (full)" if self.window_full
                    else "stopped by max_tokens")
        if self.finish_reason == "cancelled" and self.engine_warning:
            return "cut short by the engine (the reply's footer says why)"  # a lost rank
        return {"stop": "ended by the model", "cancelled": "stopped by you",
                "error": "cut short by an error"}.get(self.finish_reason,
                                                      f"ended ({self.finish_reason})")

    snapshot_warning: str | None = None
    """Why the KV snapshot after this turn was not saved ('snapshot not saved: disk
    full'); the reply is stored either way, the next open recomputes the cache."""
    engine_warning: str | None = None
    """Why the turn ended early outside the user's control (a rank of a split
    model was lost); the reply so far is kept as cancelled."""
    save_warning: str | None = None
    """Set when the reply could not be stored at once (the database was locked)."""

