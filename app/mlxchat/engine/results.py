"""What a turn's prefill and decode return, the signal that stops them, and
the turn's stats made of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlxchat.engine.kv.live import Reuse
from mlxchat.turn_stats import TurnStats


class Cancelled(Exception):
    pass


@dataclass
class Prefill:
    """What feeding the prompt cost."""

    tokens: int = 0
    seconds: float = 0.0


@dataclass
class SpeculationFigures:
    """What a speculative decode proposed, kept and cost, counted as it streams."""

    mode: str = "off"
    proposed: int = 0
    accepted: int = 0
    passes: int = 0
    """Forward passes of the target model while decoding."""

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None

    def tokens_per_pass(self, generated: int) -> float | None:
        """Of ``generated`` tokens, how many each pass gave (None when not speculating)."""
        return None if self.mode == "off" else generated / max(self.passes, 1)


@dataclass
class Decode:
    """What sampling produced: the reply and its timing."""

    pieces: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    """Every sampled token, the end token included."""
    generated: int = 0
    """Tokens sampled, the end token included."""
    finish_reason: str = "stop"
    window_full: bool = False
    """The context window ended the reply ('length' before max_tokens did)."""
    ttft_s: float = 0.0
    first_pass_s: float = 0.0
    """Seconds of the first forward pass (the tail of the prompt)."""
    decode_tps: float | None = None
    """Tokens per second after the first; None until a second token came."""
    reasoning_pieces: list[str] = field(default_factory=list)
    reasoning_tokens: int = 0
    """Sampled tokens that belong to the reasoning, its markup included."""
    reasoning_s: float = 0.0
    """Seconds from the start of sampling to the end of the reasoning."""
    reasoning_closed: bool = False
    """The reasoning budget was spent and its closing markup fed (``generated``
    and ``token_ids`` include it)."""
    speculation: SpeculationFigures = field(default_factory=SpeculationFigures)
    """What speculation proposed and kept, and the model's passes."""

    @property
    def reply(self) -> str:
        """The answer (what is stored as the reply's content)."""
        return "".join(self.pieces)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_pieces).rstrip()


def prefill_rate(tokens: int, seconds: float) -> float | None:
    """Prompt tokens a second, or None when at most one token was computed: that
    one is the tail the first decode step feeds, and its time a decode step's."""
    return tokens / max(seconds, 1e-9) if tokens > 1 else None


def turn_stats(tokens: int, reuse: Reuse, prefill: Prefill, decode: Decode, *,
               typed: tuple[int, float], drafted: tuple[int, bool], dropped: int,
               window: int, kv_bits: int | None, weights_bytes: int, total_s: float,
               context_used: int, kv_bytes: int, peak_memory_bytes: int,
               model: str = "", model_quantization: str = "", blas: str = "",
               cpu_matmul: str = "", spec_off_reason: str | None = None) -> TurnStats:
    """A turn's figures: ``tokens`` in the prompt, ``typed`` (tokens, seconds)
    prefilled while typing, ``drafted`` (tokens, rebuilt) by the draft model.
    Prefilled are the tokens computed: all the prompt's new ones once a token
    was sampled, else (stopped during prefill) what the cache holds past the
    reused ones."""
    spec = decode.speculation
    computed = (tokens - reuse.tokens if decode.generated
                else max(0, min(context_used, tokens) - reuse.tokens))
    return TurnStats(
        prompt_tokens=tokens, reused_tokens=reuse.tokens, model=model,
        model_quantization=model_quantization,
        prefilled_tokens=computed, miss_reason=reuse.reason,
        typed_prefill_tokens=typed[0], typed_prefill_s=typed[1],
        cache_source=reuse.source, dropped_messages=dropped,
        context_window=window, kv_bits=kv_bits,
        weights_bytes=weights_bytes, finish_reason=decode.finish_reason,
        window_full=decode.window_full,
        generated_tokens=decode.generated, reasoning_tokens=decode.reasoning_tokens,
        reasoning_s=decode.reasoning_s, reasoning_budget_closed=decode.reasoning_closed,
        ttft_s=decode.ttft_s, decode_tps=decode.decode_tps,
        prefill_tps=prefill_rate(computed, prefill.seconds + decode.first_pass_s)
        if decode.generated else None,
        total_s=total_s, context_used=context_used, kv_bytes=kv_bytes,
        peak_memory_bytes=peak_memory_bytes, spec_mode=spec.mode,
        draft_tokens_proposed=spec.proposed, draft_tokens_accepted=spec.accepted,
        target_passes=spec.passes,
        draft_prefilled_tokens=drafted[0], draft_rebuilt=drafted[1] and reuse.tokens > 0,
        blas=blas, cpu_matmul=cpu_matmul, spec_off_reason=spec_off_reason)
