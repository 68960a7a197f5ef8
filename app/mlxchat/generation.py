"""Generation settings: the options of a turn and the one table of what each allows
(stdlib only)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal

from mlxchat.record import Record

ContextPolicy = Literal["compact", "drop_oldest", "stop"]
CONTEXT_POLICIES: tuple[str, ...] = ("compact", "drop_oldest", "stop")
HistoryMode = Literal["ledger", "template"]
HISTORY_MODES: tuple[str, ...] = ("ledger", "template")
SPECULATIVE_MODES: tuple[str, ...] = ("auto", "off", "draft", "lookup")
CPU_MATMUL_MODES: tuple[str, ...] = ("auto", "quantized", "dequantized", "native", "int8")
TOOL_PROMPTS: tuple[str, ...] = ("template", "generic")

_INT64 = 2**63

REASONING_EFFORTS: tuple[str, ...] = ("low", "medium", "high")
COMPUTE_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
DOCS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""A document collection's name."""
MAX_DOCS_K = 20
MIN_DOCS_BUDGET = 64
DOCS_BUDGET_SHARE = 8
"""With no budget set, retrieved sources take at most 1/8 of the window..."""
DOCS_BUDGET_AUTO_MIN = 512
"""...or this many tokens where that is more (two chunks and their numbering)."""
TOOL_RESULT_SHARE = 10
"""With no budget set, a tool's result takes at most 1/10 of the window."""
MIN_TOOL_RESULT_TOKENS = 32
MAX_TOOL_STEPS = 64
TOOLS_CHOICE = re.compile(r"^-?(\*|[A-Za-z0-9][A-Za-z0-9_-]{0,63}(\.[^,\s]{1,128})?)$")
"""One selector of the ``tools`` setting: '*', SERVER or SERVER.TOOL, '-' to leave out."""


def _tools_choice(value: Any) -> bool:
    return value is None or (isinstance(value, str) and all(
        TOOLS_CHOICE.match(s.strip()) for s in value.split(",")))

GENERATION_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "temperature": (lambda v: v is None or v >= 0, ">= 0"),
    "top_p": (lambda v: v is None or 0 < v <= 1, "> 0 and <= 1"),
    "min_p": (lambda v: v is None or 0 <= v < 1, ">= 0 and < 1"),
    "top_k": (lambda v: v is None or v >= 0, "none or a whole number >= 0 (0 is off)"),
    "max_tokens": (lambda v: 1 <= v < _INT64, ">= 1"),
    "max_reasoning_tokens": (lambda v: 1 <= v < _INT64, ">= 1"),
    "thinking": (lambda v: v in (None, True, False), "on, off or none"),
    "reasoning_effort": (lambda v: v in (None, *REASONING_EFFORTS),
                         "none, " + ", ".join(REASONING_EFFORTS)),
    "seed": (lambda v: v is None or 0 <= v < _INT64, "none or a whole number >= 0"),
    "repetition_penalty": (lambda v: v is None or v > 0, "> 0"),
    "repetition_context": (lambda v: -1 <= v < _INT64,
                           "-1 (the whole context), 0 (off) or a whole number of tokens"),
    "kv_bits": (lambda v: v in (None, 4, 8), "none, 4 or 8"),
    "context_window": (lambda v: v is None or 256 <= v < _INT64, "none or a whole number >= 256"),
    "context_policy": (lambda v: v in CONTEXT_POLICIES, "compact, drop_oldest or stop"),
    "compact_at": (lambda v: 10 <= v <= 95, "10 to 95 (percent of the window)"),
    "recall": (lambda v: v in (True, False), "on or off"),
    "history": (lambda v: v in HISTORY_MODES, " or ".join(HISTORY_MODES)),
    "speculative": (lambda v: v in SPECULATIVE_MODES, ", ".join(SPECULATIVE_MODES)),
    "draft": (lambda v: v is None or (isinstance(v, str) and v.strip() != ""),
              "off or a model spec"),
    "draft_tokens": (lambda v: 1 <= v <= 16, "1 to 16"),
    "compute_dtype": (lambda v: v in (None, *COMPUTE_DTYPES), "auto, " + ", ".join(COMPUTE_DTYPES)),
    "cpu_matmul": (lambda v: v in CPU_MATMUL_MODES, ", ".join(CPU_MATMUL_MODES)),
    "docs": (lambda v: v is None or (isinstance(v, str) and DOCS_NAME.match(v) is not None),
             "off or a collection name"),
    "docs_k": (lambda v: 1 <= v <= MAX_DOCS_K, f"1 to {MAX_DOCS_K}"),
    "docs_budget": (lambda v: v is None or MIN_DOCS_BUDGET <= v < _INT64,
                    f"auto or a whole number >= {MIN_DOCS_BUDGET}"),
    "tools": (_tools_choice, "off or a list of *, SERVER, SERVER.TOOL (-NAME leaves one out)"),
    "tool_timeout": (lambda v: 0 < v <= 3600, "seconds > 0 and <= 3600"),
    "tool_result_tokens": (lambda v: v is None or MIN_TOOL_RESULT_TOKENS <= v < _INT64,
                           f"auto or a whole number >= {MIN_TOOL_RESULT_TOKENS}"),
    "max_tool_steps": (lambda v: 1 <= v <= MAX_TOOL_STEPS, f"1 to {MAX_TOOL_STEPS}"),
    "tool_prompt": (lambda v: v in TOOL_PROMPTS, " or ".join(TOOL_PROMPTS)),
}
"""What each generation setting allows (a check and the rule in words): the one
place the /set command, `mlxchat ask` flags and the config file are checked against."""

SAMPLING = ("temperature", "top_p", "min_p", "repetition_penalty")
"""Settings a model gives defaults for; None in a session follows the model's."""

UNSET_WORDS: dict[str, str] = {
    **{name: "model" for name in SAMPLING},
    "thinking": "default", "reasoning_effort": "default", "seed": "none", "top_k": "none", "kv_bits": "none",
    "context_window": "none", "draft": "off", "compute_dtype": "auto", "docs": "off",
    "docs_budget": "auto", "tools": "off", "tool_result_tokens": "auto",
}
"""The word for each setting left unset (None), as ``/set`` takes it back: the
one way ``/get`` and the export say it."""


def setting_words(name: str, value: Any) -> str:
    """A setting's value as ``/set`` takes it: never Python's None or True."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return UNSET_WORDS.get(name, "none")
    return str(value)


_WHOLE = ("top_k", "repetition_context", "max_tokens", "max_reasoning_tokens", "seed",
          "kv_bits", "context_window", "draft_tokens", "docs_k", "docs_budget",
          "tool_result_tokens", "max_tool_steps", "compact_at")
_WORDS = ("context_policy", "history", "thinking", "reasoning_effort", "speculative", "draft",
          "compute_dtype", "cpu_matmul", "docs", "tools", "tool_prompt", "recall")


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


@dataclass
class GenerationSettings(Record):
    """Sampling and cache options of a turn; each is settable with ``/set``."""

    temperature: float | None = None
    """0 means greedy decoding; None: the model's default (``/get`` says it)."""
    top_p: float | None = None
    """Nucleus sampling; 1.0 keeps every token; None: the model's default."""
    min_p: float | None = None
    """Drop tokens below this fraction of the top token's probability; 0
    disables; None: the model's default."""
    top_k: int | None = None
    """Sample only from this many likeliest tokens; None or 0: no such cut."""
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
    repetition_penalty: float | None = None
    """1.0 disables; 1.1 is a mild penalty on recently generated tokens; None:
    the model's default."""
    repetition_context: int = 20
    """Tokens the repetition penalty looks back over, the prompt's and the
    reply's (mlx-lm's repetition_context_size, Ollama's repeat_last_n): -1
    the whole context, 0 turns the penalty off."""
    kv_bits: int | None = None
    """Quantize the KV cache to 8 or 4 bits; None keeps the model's dtype."""
    context_window: int | None = None
    """Cap on the context window in tokens (at most the model's); None: the model's."""
    context_policy: ContextPolicy = "compact"
    """What to do when the conversation outgrows the window: switch to a
    compacted conversation prepared ahead of time (a summary of the oldest
    messages in their place; session/compactor.py), drop the oldest turns
    (keeping the system prompt and the newest message), or stop with an error."""
    compact_at: int = 75
    """With context_policy compact: the share of the window (percent) past which
    the compaction is prepared in idle time."""
    recall: bool = True
    """Each message brings back the passages of the conversation's own earlier
    messages, no longer in the model's view (summarized or left out), that
    match it (session/recall.py); off: never."""
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
    cpu_matmul: str = "auto"
    """How quantized layers multiply on the CPU: 'quantized' (quantized_matmul),
    'dequantized' (through the BLAS in float32: per prefill chunk, and from a kept
    float32 copy where memory allows), 'native' (mlxchat's SIMD kernel on the
    packed weights where it is built and takes the layer, else quantized_matmul),
    'auto' (per layer shape, the fastest exact path measured on this machine once;
    'int8': the same with the kernel's int8 path among them, the activations
    rounded to int8 per block of 32 as llama.cpp does: not exact;
    engine/cpu_choice.py). Not used on a GPU."""
    docs: str | None = None
    """The document collection each message retrieves from (/docs use NAME);
    None: no retrieval."""
    docs_k: int = 5
    """At most this many chunks retrieved per message."""
    docs_budget: int | None = None
    """Tokens the retrieved chunks may take; None (auto): 1/8 of the window, at least 512."""
    tools: str | None = None
    """The MCP tools the model may call (/tools on|off): '*' for every
    configured server, or SERVER and SERVER.TOOL, comma-separated ('-' in
    front leaves one out); None: no tools."""
    tool_timeout: float = 60.0
    """Seconds a tool call may take before it is given up (escape stops it sooner)."""
    tool_result_tokens: int | None = None
    """Tokens a tool's result may take (the rest is cut, and the model told);
    None (auto): a tenth of the window."""
    max_tool_steps: int = 8
    """Tool calls and their answers the model may chain for one message."""
    tool_prompt: str = "template"
    """How the tools reach a model whose chat template has no place for them:
    'template' (they do not: its template is all it sees), 'generic' (the
    generic tool prompt describes them in the system prompt). Off by default:
    the bundled SmolLM2-135M never followed it (bench/tool_prompt.py)."""

    def sampled_with(self, defaults: dict[str, float]) -> GenerationSettings:
        """These settings with each sampling setting left to the model (None)
        taken from ``defaults`` (the model's, every one named)."""
        chosen = {name: value for name in SAMPLING
                  if (value := getattr(self, name)) is None}
        return dataclasses.replace(self, **{name: defaults[name] for name in chosen})

    def check(self) -> None:
        """Raise ValueError (one line) for the first setting out of its range."""
        for name in GENERATION_RULES:
            problem = generation_problem(name, getattr(self, name))
            if problem:
                raise ValueError(problem)

