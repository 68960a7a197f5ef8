"""Plain data shared by the engine, the store, the commands and the UI (stdlib only)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, fields
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Self, Sequence

if TYPE_CHECKING:
    from mlxchat.sources import Source

Role = Literal["system", "user", "assistant", "tool"]
CacheSource = Literal["warm", "snapshot", "cold"]
ContextPolicy = Literal["drop_oldest", "stop"]
CONTEXT_POLICIES: tuple[str, ...] = ("drop_oldest", "stop")
HistoryMode = Literal["ledger", "template"]
HISTORY_MODES: tuple[str, ...] = ("ledger", "template")
SPECULATIVE_MODES: tuple[str, ...] = ("auto", "off", "draft", "lookup")

_INT64 = 2**63

NO_SYSTEM_ROLE = ("this model's chat template has no system role: the system prompt goes at "
                  "the start of the first message")
"""The one-line notice for templates that refuse a system message (Gemma 2)."""
REASONING_EFFORTS: tuple[str, ...] = ("low", "medium", "high")
COMPUTE_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
DOCS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""A document collection's name."""
MAX_DOCS_K = 20
MIN_DOCS_BUDGET = 64
DOCS_BUDGET_SHARE = 4
"""With no budget set, retrieved sources take at most 1/4 of the window."""

GENERATION_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "temperature": (lambda v: v >= 0, ">= 0"),
    "top_p": (lambda v: 0 < v <= 1, "> 0 and <= 1"),
    "min_p": (lambda v: 0 <= v < 1, ">= 0 and < 1"),
    "max_tokens": (lambda v: 1 <= v < _INT64, ">= 1"),
    "max_reasoning_tokens": (lambda v: 1 <= v < _INT64, ">= 1"),
    "thinking": (lambda v: v in (None, True, False), "on, off or none"),
    "reasoning_effort": (lambda v: v in (None, *REASONING_EFFORTS),
                         "none, " + ", ".join(REASONING_EFFORTS)),
    "seed": (lambda v: v is None or 0 <= v < _INT64, "none or a whole number >= 0"),
    "repetition_penalty": (lambda v: v > 0, "> 0"),
    "kv_bits": (lambda v: v in (None, 4, 8), "none, 4 or 8"),
    "context_window": (lambda v: v is None or 256 <= v < _INT64, "none or a whole number >= 256"),
    "context_policy": (lambda v: v in CONTEXT_POLICIES, " or ".join(CONTEXT_POLICIES)),
    "history": (lambda v: v in HISTORY_MODES, " or ".join(HISTORY_MODES)),
    "speculative": (lambda v: v in SPECULATIVE_MODES, ", ".join(SPECULATIVE_MODES)),
    "draft": (lambda v: v is None or (isinstance(v, str) and v.strip() != ""),
              "off or a model spec"),
    "draft_tokens": (lambda v: 1 <= v <= 16, "1 to 16"),
    "compute_dtype": (lambda v: v in (None, *COMPUTE_DTYPES), "auto, " + ", ".join(COMPUTE_DTYPES)),
    "docs": (lambda v: v is None or (isinstance(v, str) and DOCS_NAME.match(v) is not None),
             "off or a collection name"),
    "docs_k": (lambda v: 1 <= v <= MAX_DOCS_K, f"1 to {MAX_DOCS_K}"),
    "docs_budget": (lambda v: v is None or MIN_DOCS_BUDGET <= v < _INT64,
                    f"auto or a whole number >= {MIN_DOCS_BUDGET}"),
}
"""What each generation setting allows (a check and the rule in words): the one
place the /set command, `mlxchat ask` flags and the config file are checked against."""

_WHOLE = ("max_tokens", "max_reasoning_tokens", "seed", "kv_bits", "context_window",
          "draft_tokens", "docs_k", "docs_budget")
_WORDS = ("context_policy", "history", "thinking", "reasoning_effort", "speculative", "draft",
          "compute_dtype", "docs")


def generation_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not allowed for setting ``name``, or None when it is."""
    check, rule = GENERATION_RULES[name]
    if value is not None and name not in _WORDS:
        whole = isinstance(value, int) and not isinstance(value, bool)
        number = whole or (isinstance(value, float) and math.isfinite(value))
        if not (whole if name in _WHOLE else number):
            return f"{name} must be {rule}; got {value!r}"
    try:
        ok = check(value)
    except TypeError:
        ok = False
    return None if ok else f"{name} must be {rule}; got {value!r}"


@dataclass(frozen=True)
class CalledTool:
    """A tool call a reply made: the tool's name, its arguments (JSON data:
    an object, or the text the model wrote when it was not JSON) and its id."""

    name: str
    arguments: Any
    id: str = ""


def quoted(text: str) -> str:
    """``text`` as a Markdown quote, line by line."""
    return "\n".join("> " + line if line else ">" for line in text.splitlines() or [""])


def tool_label(message: "Message") -> str:
    """What a tool result is shown under: the tool it came from."""
    return f"tool result · {message.tool_name or 'unnamed tool'}"


def calls_text(calls: Sequence[CalledTool]) -> str:
    """A reply's tool calls, one line each: the name and the arguments."""
    def args(call: CalledTool) -> str:
        if isinstance(call.arguments, str):
            return call.arguments
        return json.dumps(call.arguments, ensure_ascii=False)

    return "\n".join(f"→ {call.name}({args(call)})" for call in calls)


@dataclass
class Message:
    """One message of a conversation, as the engine and the store see it."""

    role: Role
    content: str
    id: int | None = None
    """Row id in the session store; None until stored."""
    parent_id: int | None = None
    """The message this one answers or follows; edits and retries branch here."""
    token_count: int | None = None
    """Tokens of this message in the rendered prompt, when measured."""
    stats: "TurnStats | None" = None
    """For an assistant reply: the measured figures of the turn that produced it."""
    cancelled: bool = False
    """An assistant reply stopped by the user: the text is what was shown."""
    created: float | None = None
    """Unix time the message was stored."""
    token_ids: list[int] | None = None
    """What this message added to the conversation's token sequence (its token
    ledger): for a user message what the template rendered for it after the
    history, for a reply the tokens sampled. None when not recorded."""
    ledger_key: str | None = None
    """Identifies the template, model and system prompt ``token_ids`` were made with."""
    ledger_start: bool = False
    """``token_ids`` hold the whole prompt up to here: earlier ids are not used."""
    reasoning: str | None = None
    """For a reply of a reasoning model: its reasoning, apart from ``content``."""
    sources: "list[Source] | None" = None
    """For a user message sent with a collection in use: the chunks retrieved
    for it, as they are in ``content`` (never retrieved again)."""
    tool_calls: tuple[CalledTool, ...] = ()
    """For a reply: the tools it called (``content`` is the text around the calls)."""
    tool_call_id: str | None = None
    """For a tool result (role ``tool``): the id of the call it answers."""
    tool_name: str | None = None
    """For a tool result: the name of the tool that gave it."""


class Record:
    """A dataclass stored as JSON: unknown keys (from newer versions) are ignored."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Self:
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass
class GenerationSettings(Record):
    """Sampling and cache options of a turn; each is settable with ``/set``."""

    temperature: float = 0.7
    """0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling; 1.0 keeps every token."""
    min_p: float = 0.0
    """Drop tokens below this fraction of the top token's probability; 0 disables."""
    max_tokens: int = 1024
    """Upper bound on the answer's length in tokens."""
    max_reasoning_tokens: int = 4096
    """Upper bound on the reasoning's length, for models that reason (counted
    apart from max_tokens, so a long thought does not eat the answer)."""
    thinking: bool | None = None
    """``/think on|off``: passed to the template as enable_thinking; None keeps
    the model's default."""
    reasoning_effort: str | None = None
    """low, medium or high, for templates that take it (gpt-oss); None: theirs."""
    seed: int | None = None
    """Random seed for sampling; None draws a fresh one each turn."""
    repetition_penalty: float = 1.0
    """1.0 disables; 1.1 is a mild penalty on recently generated tokens."""
    kv_bits: int | None = None
    """Quantize the KV cache to 8 or 4 bits; None keeps the model's dtype."""
    context_window: int | None = None
    """Cap on the context window in tokens (at most the model's); None: the model's."""
    context_policy: ContextPolicy = "drop_oldest"
    """What to do when the conversation outgrows the window: drop the oldest
    turns (keeping the system prompt and the newest message) or stop with an error."""
    history: HistoryMode = "ledger"
    """'ledger': earlier messages keep the tokens they were sent with, so a
    follow-up prefills only itself; 'template': re-render the whole conversation
    as the chat template would today (re-prefills what the template changes)."""
    speculative: str = "auto"
    """'draft': a small model of the same vocabulary proposes tokens the model
    verifies in one pass; 'lookup': the proposal is what followed the last
    earlier occurrence of the recent tokens. The reply is the same either way.
    'auto': lookup where this device verifies cheaply (measured once per model
    after the first reply), plain decoding elsewhere and with a fixed seed."""
    draft: str | None = None
    """The draft model's spec (an alias, repo, folder) for speculative=draft."""
    draft_tokens: int = 3
    """Tokens proposed per verifying pass of the model."""
    compute_dtype: str | None = None
    """What activations and the KV cache compute in; None (auto): float32 on
    the CPU, the family's training dtype on a GPU (models/precision.py)."""
    docs: str | None = None
    """The document collection each message retrieves from (/docs use NAME);
    None: no retrieval."""
    docs_k: int = 5
    """At most this many chunks retrieved per message."""
    docs_budget: int | None = None
    """Tokens the retrieved chunks may take; None (auto): a quarter of the window."""

    def check(self) -> None:
        """Raise ValueError (one line) for the first setting out of its range."""
        for name in GENERATION_RULES:
            problem = generation_problem(name, getattr(self, name))
            if problem:
                raise ValueError(problem)


@dataclass
class TurnStats(Record):
    """Measured figures of one turn; every number is read, none estimated."""

    ttft_s: float = 0.0
    """Seconds from the start of the turn to the first generated token."""
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
    """'stop' (end-of-turn token), 'length' (max_tokens), 'cancelled', 'error'."""
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
    miss_reason: str | None = None
    """Why fewer tokens were reused than the conversation shares with the cache."""
    dropped_messages: int = 0
    """Oldest messages left out to fit the context window."""
    total_s: float = 0.0
    spec_mode: str = "off"
    """How tokens were proposed: 'off', 'draft' (a draft model) or 'lookup'."""
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

    def __post_init__(self) -> None:
        # Rows stored before the rates could be None say 0.0 for "not measured":
        # a measured rate is never 0, so read those as None.
        if not self.prefill_tps:
            self.prefill_tps = None
        if not self.decode_tps:
            self.decode_tps = None

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

    snapshot_warning: str | None = None
    engine_warning: str | None = None
    """Why the turn ended early outside the user's control (a rank of a split
    model was lost); the reply so far is kept as cancelled."""
    save_warning: str | None = None
    """Set when the reply could not be stored at once (the database was locked)."""
    """Why the KV snapshot after this turn was not saved ('snapshot not saved: disk
    full'); the reply is stored either way, the next open recomputes the cache."""


@dataclass(frozen=True)
class Pin:
    """A document pinned into a session right after its system prompt."""

    name: str
    path: str
    """Where it was read from (shown only; the text below is what the model sees)."""
    text: str
    tokens: int = 0
    """What it adds to the prompt, counted when it was pinned."""
    prefix_key: str | None = None
    """The shared KV prefix of the session's system part (same on all its pins)."""

    @property
    def text_hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()


def pinned_block(name: str, text: str) -> str:
    """How a pinned document goes into the system part."""
    return f'<document name="{name}">\n{text}\n</document>'


def pinned_system(system: str | None, pins: Sequence[Pin]) -> str | None:
    parts = ([system] if system else []) + [pinned_block(p.name, p.text) for p in pins]
    return "\n\n".join(parts) if parts else None


@dataclass
class Session:
    """A saved conversation: settings plus the messages of its current branch."""

    id: int | None = None
    title: str = "New chat"
    model: str = ""
    system_prompt: str | None = None
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    messages: list[Message] = field(default_factory=list)
    """The current branch, root first."""
    leaf_id: int | None = None
    created: float | None = None
    updated: float | None = None
    title_locked: bool = False
    """True once the user renamed it; titles no longer follow the first message."""
    pins: list[Pin] = field(default_factory=list)
    """Documents pinned after the system prompt, in order (``/pin``)."""

    @property
    def context_system(self) -> str | None:
        """What the model gets as its system part: the system prompt, then each
        pinned document (the exact token prefix pinned sessions share)."""
        return pinned_system(self.system_prompt, self.pins)


def human_bytes(n: int | float) -> str:
    """1536 -> '1.5 KB' (decimal units, as memory gauges show)."""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


@dataclass
class SessionSummary:
    """One row of the sessions browser / ``mlxchat sessions list``."""

    id: int
    title: str
    model: str
    created: float
    updated: float
    message_count: int = 0
    snapshot_bytes: int = 0
    """Size of the session's KV snapshot file on disk, 0 if none."""
    snippet: str = ""
    """For a search result: the matching text with the match in [brackets]."""
    pins: int = 0
    """Documents pinned to it."""
    from_api: bool = False
    """Started or used by a client of ``mlxchat serve``."""


def relative_time(ts: float, now: float | None = None) -> str:
    """A past Unix time as 'just now', '5 min ago', '3 h ago', 'yesterday', '4 days ago'
    or a date; ``now`` is injectable so tests and snapshots are stable."""
    now = time.time() if now is None else now
    delta = now - ts
    if delta < 60:
        return "just now"
    if delta < 3600:
        return f"{int(delta // 60)} min ago"
    if delta < 86400:
        return f"{int(delta // 3600)} h ago"
    if delta < 2 * 86400:
        return "yesterday"
    if delta < 7 * 86400:
        return f"{int(delta // 86400)} days ago"
    return time.strftime("%Y-%m-%d", time.localtime(ts))


_ATTACHMENT = re.compile(r'\s*<file name="([^"\n]*)">\n.*?\n</file>', re.S)


def attachment_block(name: str, text: str) -> str:
    """How an attached file goes into a user message."""
    return f'<file name="{name}">\n{text}\n</file>'


@dataclass
class Attachment:
    """A text file waiting to go into the next message."""

    path: Path
    text: str
    tokens: int

    @property
    def block(self) -> str:
        return attachment_block(self.path.name, self.text)


def typed_text(content: str) -> str:
    """A user message without the attached files in front: what was typed, or
    the files' names when nothing was (for titles and previews)."""
    names, rest = [], content
    while (found := _ATTACHMENT.match(rest)) is not None:
        names.append(found.group(1))
        rest = rest[found.end():]
    if not names:
        return content
    return rest if rest.strip() else ", ".join(names)
