"""Output that follows a JSON schema: the schema compiled by llguidance, and
a logits processor that masks the tokens the grammar does not allow.

Why llguidance (bench/grammar_engines.py, a mid-size schema, this 2-core CPU
at load 4-5, the bundled 49k-piece tokenizer / a 152k byte-level BPE of
Qwen's size): it compiles a schema in about a millisecond (1.2 / 1.1 ms)
and computes each token's mask as the reply goes (median 0.010 / 0.014 ms,
mean 0.14 / 0.69 ms with the first tokens' lexer work). outlines-core (0.8 s
/ 13.4 s) and xgrammar (0.85 s / 3.2 s) build a schema's masks up front,
then answer a token in microseconds: a server sent a new schema or tool set
with a request would pay those seconds before its first token, and xgrammar
needs torch to import at all. Every engine's mask is noise beside a decode
step (tens of ms here); llguidance's token table (0.6 s / 2.0 s) is built
once per model. It also bounds its work per schema and per token (a hostile
schema fails with a reason, never hangs), builds its table from the model's
own Hugging Face tokenizer, and is what llama.cpp and vLLM use.

Once the grammar is complete only the end token is allowed, so a constrained
reply stops by itself with the end token the model's template closes a turn
with: the reply's token ids are what was sampled, and the ledger stores them
as any other reply's.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np

from mlxchat.engine.events import EngineError
from mlxchat.generation import GenerationSettings

MAX_SCHEMA_BYTES = 256 * 1024
"""A schema's JSON text may be this long; a longer one is refused unread."""
ANY_OBJECT: dict[str, Any] = {"type": "object"}
"""What ``json_object`` (OpenAI) and ``"json"`` (Ollama) ask for."""
_JSON_OPTIONS = {"whitespace_flexible": False}
"""Compact JSON: free whitespace lets a small model loop on newlines forever."""


SPECULATION_OFF = ("speculation off: the reply follows a schema, and mlx-lm's "
                   "speculative loops verify proposals without the grammar's mask")
"""Why a constrained turn decodes plainly (its stats say it)."""


class SchemaError(EngineError):
    """A schema the engine cannot compile; the message is one line that says why."""


def parser_limits() -> Any:
    import llguidance
    # Bounded compile time and memory for any schema (llguidance's own fuel).
    return llguidance.LLParserLimits(initial_lexer_fuel=2_000_000, step_lexer_fuel=400_000,
                                     max_lexer_states=100_000, max_grammar_size=200_000,
                                     verbose_errors=False)


_TOKENIZERS: dict[int, tuple[Any, Any]] = {}
_TOKENIZERS_LOCK = threading.Lock()


def end_token(tokenizer: Any) -> int:
    """The end token a complete reply closes with: the tokenizer's own."""
    eos = getattr(tokenizer, "eos_token_id", None)
    return eos if isinstance(eos, int) else min(tokenizer.eos_token_ids)


def grammar_tokenizer(tokenizer: Any) -> Any:
    """llguidance's token table for a model's tokenizer (mlx-lm's wrapper),
    built once per tokenizer (about a second for 150k pieces)."""
    import llguidance
    with _TOKENIZERS_LOCK:
        held = _TOKENIZERS.get(id(tokenizer))
        if held is not None and held[0] is tokenizer:
            return held[1]
        backend = getattr(getattr(tokenizer, "_tokenizer", None), "backend_tokenizer", None)
        if backend is None:
            raise SchemaError("this model's tokenizer has no Hugging Face tokenizer.json, "
                              "so output cannot follow a schema with it")
        built = llguidance.LLTokenizer(backend.to_str(), eos_token=end_token(tokenizer))
        if len(_TOKENIZERS) >= 4:
            _TOKENIZERS.clear()
        _TOKENIZERS[id(tokenizer)] = (tokenizer, built)
        return built


def read_grammar_tokenizer(tokenizer: Any) -> None:
    """``grammar_tokenizer`` built now (a server's warm-up) where the model
    can follow a schema: else a first request with tools (every agent's) or
    a schema pays it (13 s for Gemma 3's 262k pieces on a busy 2-core CPU)."""
    try:
        grammar_tokenizer(tokenizer)
    except SchemaError:
        pass


@dataclass(frozen=True)
class OutputFormat:
    """What a reply must be: JSON that follows ``schema``."""

    schema: dict[str, Any]
    name: str = ""
    """The schema's name, as the request gave it ('' when none)."""

    @classmethod
    def any_object(cls) -> OutputFormat:
        return cls(ANY_OBJECT, "json_object")


@dataclass(frozen=True)
class CompiledFormat:
    """A schema compiled for one tokenizer; each reply starts its own matcher."""

    format: OutputFormat
    matcher: Any
    """The compiled grammar at its start; never advanced (each reply copies it)."""
    vocab: int
    """Pieces in llguidance's token table."""
    eos: int
    """The end token the grammar allows once complete."""
    opens: tuple[int, ...] = ()
    """Lazy: the text stays free until the reply writes these tokens (a tool
    call's open marker); the grammar then holds until it is complete, and the
    text is free again. (): the grammar holds from the reply's first token."""

    def processor(self) -> GrammarProcessor:
        return GrammarProcessor(self.matcher, self.vocab, self.eos, opens=self.opens)


def compile_format(tokenizer: Any, fmt: OutputFormat) -> CompiledFormat:
    """Compile ``fmt`` for ``tokenizer`` (mlx-lm's wrapper); raises SchemaError
    with llguidance's reason when it cannot."""
    import llguidance
    if not isinstance(fmt.schema, dict):
        raise SchemaError("the schema must be a JSON object")
    size = len(json.dumps(fmt.schema))
    if size > MAX_SCHEMA_BYTES:
        raise SchemaError(f"the schema is {size:,} bytes of JSON; at most "
                          f"{MAX_SCHEMA_BYTES:,} are compiled")
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(fmt.schema,
                                                                defaults=_JSON_OPTIONS)
    except (ValueError, TypeError) as exc:
        raise SchemaError(f"the schema cannot be compiled: {reason_line(exc)}") from None
    table = grammar_tokenizer(tokenizer)
    matcher = llguidance.LLMatcher(table, grammar, log_level=0, limits=parser_limits())
    if matcher.is_error():
        raise SchemaError(f"the schema cannot be compiled: {reason_line(matcher.get_error())}")
    return CompiledFormat(fmt, matcher, table.vocab_size, end_token(tokenizer))


def reason_line(reason: Any) -> str:
    text = " ".join(str(reason).split())
    return text if len(text) <= 300 else text[:297] + "..."


class GrammarProcessor:
    """An mlx-lm logits processor: before each token, the grammar's mask; the
    token sampled after it is fed to the grammar on the next call.

    mlx-lm calls a processor with the tokens so far (the fed tail first) and
    the logits: the first call only notes where the reply starts. Lazy
    (``opens``): no mask until the reply writes ``opens``, then the grammar's
    from its start until it is complete (tokens compared as mlx-lm's server
    finds a tool call's start)."""

    def __init__(self, start: Any, vocab: int, eos: int, *, opens: tuple[int, ...] = ()):
        self.start, self.vocab, self.eos, self.opens = start, vocab, eos, opens
        self.matcher = None if opens else start.deep_copy()
        self._seen: int | None = None
        self._tail: list[int] = []
        self._bits = np.zeros((vocab + 31) // 32, dtype=np.int32)

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        n = int(tokens.shape[-1])
        if self._seen is None or n < self._seen:
            self._seen = n  # a new stream: its prompt is not the reply's
        elif n > self._seen:
            new = tokens[self._seen:].tolist()  # waits for the last step's token only
            self._seen = n
            # This step's forward pass runs (MLX's stream) while the grammar
            # takes the token and computes its mask here.
            mx.async_eval(logits)
            if self.opens:
                self._follow(new)
            else:
                self.matcher.consume_tokens(new)
        return logits if self.matcher is None else self.masked(logits)

    def _follow(self, new: list[int]) -> None:
        """Lazy: open the grammar at ``opens``, let go once it is complete."""
        for token in new:
            if self.matcher is not None:
                self.matcher.consume_token(token)
                if self.matcher.is_accepting() and not self.matcher.is_error():
                    self.matcher, self._tail = None, []
                continue
            self._tail = (self._tail + [token])[-len(self.opens):]
            if tuple(self._tail) == self.opens:
                self.matcher = self.start.deep_copy()

    def masked(self, logits: mx.array) -> mx.array:
        """``logits`` with every token the grammar forbids at -inf (the end
        token alone once the grammar is complete or broken)."""
        if self.matcher.is_error():
            allowed = np.zeros(self.vocab, dtype=bool)
            allowed[self.eos] = True
        else:
            self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            allowed = np.unpackbits(self._bits.view(np.uint8),
                                    bitorder="little")[:self.vocab].astype(bool)
        width = logits.shape[-1]
        if width != self.vocab:  # embeddings padded past the vocabulary, or fewer
            allowed = np.pad(allowed, (0, max(0, width - self.vocab)))[:width]
        return mx.where(mx.array(allowed), logits, -mx.inf)


def speculation_off(settings: GenerationSettings, output: CompiledFormat | None, *,
                    split: bool) -> tuple[GenerationSettings, str | None]:
    """The settings a turn decodes under and why speculation is off for it
    (None when the turn is not constrained or it was off already)."""
    if output is None:
        return settings, None
    if split:
        raise SchemaError("output that follows a schema is not supported on a model "
                          "split across machines")
    if settings.speculative == "off":
        return settings, None
    why = SPECULATION_OFF if not output.opens else SPECULATION_OFF.replace(
        "the reply follows a schema", "the reply's tool calls follow their tools' schemas")
    return dataclasses.replace(settings, speculative="off"), why
