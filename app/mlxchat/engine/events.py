"""What a turn reports while it runs; plain data, consumed by the CLI and the UI."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlxchat.errors import MlxchatError
from mlxchat.models.memory import KVLayout
from mlxchat.turn_stats import TurnStats


class EngineError(MlxchatError):
    """A turn was refused before it started; the message is one line for the user."""


class ContextOverflowError(EngineError):
    """The conversation does not fit the context window under the chosen policy."""


@dataclass
class Preparing:
    """Work a turn does before its prefill that can take seconds, in a few words
    ('restoring the KV cache from disk'): shown while the turn waits on it; the
    next event ends it."""

    what: str


@dataclass
class PrefillProgress:
    """Prompt processing: ``done`` of ``total`` new tokens, at ``tps`` tokens/s.
    ``total`` is every token the turn computes before the reply (what TurnStats
    calls prefilled); the last event has ``done == total``."""

    done: int
    total: int
    tps: float | None = None
    """None until a chunk was timed (and for a prefill of the one fed token)."""
    cached_tokens: int = 0
    """Tokens in the KV cache now, for the live Context gauge."""
    kv_bytes: int = 0
    """The cache's bytes now, scaled from its bytes per token (no MLX work)."""


@dataclass(frozen=True)
class TokenLogprob:
    """A sampled token's log-probability under the model (its own log-softmax,
    before penalties, biases, the temperature or a schema's mask) and the
    ``top`` most likely tokens there, each (id, log-probability), best first."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass
class TextDelta:
    """New reply text; ``generated_tokens`` so far at ``decode_tps``."""

    text: str
    generated_tokens: int
    decode_tps: float | None = None
    """None until a second token came (no interval to measure before)."""
    cached_tokens: int = 0
    """Tokens in the KV cache now (prompt and reply so far)."""
    kv_bytes: int = 0
    """The cache's bytes now, scaled from its bytes per token."""
    part: str = "answer"
    """'reasoning' (shown folded, stored apart) or 'answer' (the reply's content)."""
    acceptance: float | None = None
    """While speculating: the fraction of proposed tokens accepted so far."""
    tokens_per_pass: float | None = None
    """While speculating: tokens so far per forward pass of the model."""
    logprobs: tuple[TokenLogprob, ...] = ()
    """With log-probabilities asked for: the tokens sampled since the last
    delta (an end token left out; a token shown with the next text)."""
    choice: int = 0
    """Which of a turn's choices (``ReplyOptions.choices``) says it: 0 is the
    reply the conversation keeps."""


@dataclass
class TurnDone:
    """The last event of a turn (also after a cancel): the whole reply and its stats."""

    reply: str
    stats: TurnStats
    dropped_messages: int = 0
    """Oldest messages the drop_oldest policy left out of this turn's prompt."""
    token_ids: list[int] = field(default_factory=list)
    """The reply's token ids as sampled (reasoning and the end token included):
    what it adds to the conversation's token ledger."""
    reasoning: str = ""
    """The reply's reasoning text, apart from ``reply`` (the answer)."""


@dataclass
class ChoiceDone:
    """The end of one of a turn's other choices (``choice`` >= 1), before the
    turn's ``TurnDone`` (choice 0's); kept nowhere."""

    choice: int
    reply: str
    reasoning: str
    finish_reason: str
    generated_tokens: int
    """Sampled, the end token included."""
    token_ids: list[int] = field(default_factory=list)


@dataclass
class PromptLogprobs:
    """The prompt's own tokens' log-probabilities, each under the tokens
    before it (None for the first, which follows nothing), once prefilled."""

    entries: tuple[TokenLogprob | None, ...]


Event = Preparing | PrefillProgress | TextDelta | ChoiceDone | PromptLogprobs | TurnDone


@dataclass
class CacheLoad:
    """Outcome of loading KV cache files (segments, or an old snapshot): ``ok``,
    or a ``reason`` they were rejected."""

    ok: bool
    tokens: int = 0
    reason: str | None = None
    """Why it was rejected; with ``ok``, why only the first ``tokens`` were restored."""
    from_live: bool = False
    """The live cache held those tokens already: no file was read."""


@dataclass(frozen=True)
class RankFigures:
    """What one rank of a split model holds, measured on that rank."""

    rank: int
    weights_bytes: int
    kv_bytes: int
    peak_memory_bytes: int


@dataclass
class EngineState:
    """Live figures for the gauges, read from the cache arrays and MLX."""

    model_name: str = ""
    cached_tokens: int = 0
    context_window: int = 0
    kv_bytes: int = 0
    kv_layout: KVLayout | None = None
    """How the live cache grows per token by layer kind (None while empty)."""
    kv_bits: int | None = None
    kv_dtype: str = "-"
    """'fp16', 'bf16', 'fp32', or '8-bit' / '4-bit' when quantized."""
    cache_source: str = "cold"
    """Where the cached tokens came from: 'warm' (this process), 'snapshot' or 'cold'."""
    weights_bytes: int = 0
    kept_copies_bytes: int = 0
    """Float32 copies of quantized weights kept beside them for the CPU's
    matmuls (models/cpu_matmul.py), apart from weights_bytes."""
    bits_per_weight: float = 0.0
    """Of the weights as loaded (scales and biases included), not as in the file."""
    scales_dtype: str = "-"
    """dtype of the quantization scales in memory ('-' when not quantized)."""
    quantization: str = ""
    """The weights' format, e.g. 'int4 (g32)'."""
    compute_dtype: str = ""
    """What activations and the KV cache compute in (models/precision.py)."""
    peak_memory_bytes: int = 0
    draft_model: str = ""
    """The draft model's name, when one is loaded for speculative decoding."""
    draft_kv_bytes: int = 0
    """Bytes the draft model's KV cache holds (apart from kv_bytes)."""
    api_kv_bytes: int = 0
    """Bytes the API server's engine's KV cache holds, serving beside the chat
    (apart from kv_bytes; set by the app)."""
    busy: bool = False
    last_stats: TurnStats | None = field(default=None)
    pinned_tokens: int = 0
    """Of ``cached_tokens``, the pinned documents' shared prefix (set by the conversation)."""
    compact_at: int = 0
    """Tokens past which a compaction is prepared (0: another context policy; set
    by the conversation)."""
    compaction: str = ""
    """Where that compaction stands, in words ('ready', 'preparing', ...)."""
    layout: str = ""
    """How the model is split: '2 ranks · tensor · 3.1 GB each'; '' on one rank."""
    ranks: list[RankFigures] = field(default_factory=list)
    """Each rank's own figures, gathered after the last turn (empty on one rank
    and before the first turn of a split model)."""
