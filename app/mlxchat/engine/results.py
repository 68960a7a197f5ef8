"""What a turn's prefill and decode return, and the signal that stops them."""

from __future__ import annotations

from dataclasses import dataclass, field


class Cancelled(Exception):
    pass


@dataclass
class Prefill:
    """What feeding the prompt cost."""

    tokens: int = 0
    seconds: float = 0.0


@dataclass
class Speculation:
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
    ttft_s: float = 0.0
    first_pass_s: float = 0.0
    """Seconds of the first forward pass (the tail of the prompt)."""
    decode_tps: float = 0.0
    reasoning_pieces: list[str] = field(default_factory=list)
    reasoning_tokens: int = 0
    """Sampled tokens that belong to the reasoning, its markup included."""
    reasoning_s: float = 0.0
    """Seconds from the start of sampling to the end of the reasoning."""
    speculation: Speculation = field(default_factory=Speculation)
    """What speculation proposed and kept, and the model's passes."""

    @property
    def reply(self) -> str:
        """The answer (what is stored as the reply's content)."""
        return "".join(self.pieces)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_pieces).rstrip()
