"""The UI's labels and lines for what the engine reports: pure functions, no
Textual, one place to test. Plain numbers are written by ``mlxchat.units``, so a
test can compare the screen with ``fmt_*(value)`` of the value it passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from mlxchat.models.memory import KVLayout
from mlxchat.turn_stats import CACHE_SOURCE_WORDS, TurnStats
from mlxchat.units import fmt_int, fmt_seconds, fmt_tps, plural

Level = Literal["ok", "warning", "error"]

WARNING_PERCENT = 80
ERROR_PERCENT = 95

REASONING_CLOSED = "thinking closed at its budget"
"""Said of a reply whose reasoning ran to max_reasoning_tokens and was closed."""

def fmt_bits_per_weight(bpw: float, scales_dtype: str | None = None) -> str:
    """'4.52 bits/weight (float32 scales)': with the scales' dtype when quantized,
    which is why the figure in memory can exceed the file's (float16 scales)."""
    scales = f" ({scales_dtype} scales)" if scales_dtype and scales_dtype != "-" else ""
    return f"{bpw:.2f} bits/weight{scales}"


def fmt_precision(quantization: str, compute_dtype: str) -> str:
    """'int4 g32 · computes in float32': the weights' format and the activations' dtype."""
    weights = quantization.replace(" (g", " g").replace(")", "")
    if weights in ("", compute_dtype):  # a float model: its dtype says it already
        return f"computes in {compute_dtype}"
    return f"{weights} · computes in {compute_dtype}"


def usage_level(part: int, whole: int) -> Level:
    """'warning' from 80% of ``whole``, 'error' from 95% (integer maths, no float edge)."""
    if whole <= 0:
        return "ok"
    if part * 100 >= ERROR_PERCENT * whole:
        return "error"
    if part * 100 >= WARNING_PERCENT * whole:
        return "warning"
    return "ok"


def kv_bits_label(kv_bits: int | None, dtype: str | None = None) -> str:
    """8 -> '8-bit'; None with dtype 'float16' -> 'fp16'; None alone (or the
    engine's '-': no model to tell) -> '—'. The engine names an empty cache's
    type from the model, so a loaded model always shows a real one."""
    if kv_bits is not None:
        return {16: "fp16", 32: "fp32"}.get(kv_bits, f"{kv_bits}-bit")
    if dtype and dtype != "-":
        short = dtype.replace("mlx.core.", "")
        return {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}.get(short, short)
    return "—"


def cache_source_label(source: str) -> str:
    return CACHE_SOURCE_WORDS.get(source, source)


@dataclass(frozen=True)
class KvRoom:
    """How many more tokens fit: by the memory budget at what the next tokens
    add (per layer kind: a sliding window stops growing when full), and by
    what is left of the context window."""

    by_memory: int | None
    """None until the cache holds a token (no rate to extrapolate from), or
    once it has stopped growing (``grows`` False)."""
    by_window: int
    limit: Literal["memory", "window"]
    grows: bool = True

    @property
    def tokens(self) -> int:
        return self.by_window if self.by_memory is None else min(self.by_memory, self.by_window)


def kv_room(*, kv_bytes: int, cached_tokens: int, budget_bytes: int,
            context_window: int, layout: KVLayout | None = None) -> KvRoom:
    """The tokens the budget left after ``kv_bytes`` holds, at the bytes each
    layer kind adds per token (``layout``; without one, the average so far),
    capped by the window remaining."""
    by_window = max(context_window - cached_tokens, 0)
    if kv_bytes <= 0 or cached_tokens <= 0:
        return KvRoom(None, by_window, "window")
    left = max(budget_bytes - kv_bytes, 0)
    if layout is None:
        # Integer form of the same quotient, floored: no float rounding in the figure.
        by_memory: int | None = left * cached_tokens // kv_bytes
    else:
        by_memory = layout.tokens_within(cached_tokens, left)
        if by_memory is None:
            return KvRoom(None, by_window, "window", grows=False)
    return KvRoom(by_memory, by_window, "memory" if by_memory < by_window else "window")


def speculation_text(acceptance: float | None, tokens_per_pass: float | None,
                     mode: str = "") -> str:
    """'draft 82% accepted · 2.4 tok/pass' (acceptance None: nothing proposed yet)."""
    accepted = "nothing proposed" if acceptance is None else f"{acceptance:.0%} accepted"
    return (f"{mode} " if mode else "") + f"{accepted} · {tokens_per_pass or 0:.2f} tok/pass"


def transcript_stats_line(stats: TurnStats) -> str:
    """The compact line under an assistant reply in the transcript."""
    parts = [  # no ttft for a turn stopped before its first token
        *([] if stats.first_token_s is None else [f"ttft {fmt_seconds(stats.first_token_s)}"]),
        fmt_tps(stats.decode_tps),
        plural(stats.generated_tokens, "token")
        + (f" ({fmt_int(stats.reasoning_tokens)} thinking, {fmt_int(stats.answer_tokens)} "
           "answer)" if stats.reasoning_tokens else ""),
        f"reused {fmt_int(stats.reused_tokens)} / prefilled {fmt_int(stats.prefilled_tokens)}",
        cache_source_label(stats.cache_source),
    ]
    if stats.reasoning_budget_closed:
        parts.append(REASONING_CLOSED)
    if stats.spec_mode != "off":
        parts.append(speculation_text(stats.acceptance, stats.tokens_per_pass,
                                      stats.spec_mode))
        if stats.draft_rebuilt:
            parts.append(f"draft cache rebuilt ({fmt_int(stats.draft_prefilled_tokens)} tokens)")
    if stats.finish_reason != "cancelled":  # a stop is said in front: "(stopped)"
        parts.append(stats.ending)
    if stats.dropped_messages:  # the cache's miss too: said once
        parts.append(f"{fmt_int(stats.dropped_messages)} oldest messages left out")
    elif stats.miss_words:
        parts.append(stats.miss_words)
    if stats.snapshot_warning:
        parts.append(stats.snapshot_warning)
    if stats.engine_warning:
        parts.append(stats.engine_warning)
    if stats.save_warning:
        parts.append(stats.save_warning)
    return " · ".join(parts)


def _clipped(name: str, width: int = 20) -> str:
    return name if len(name) <= width else name[:width - 1] + "…"


def pending_line(files: Sequence[tuple[str, int]], images: Sequence[str]) -> str | None:
    """'attached: GPL-3 (7,652 tokens) · photo.png': what /attach and
    /image hold for the next message (name and tokens of each file), short
    enough for the input's border at 80 columns; None when nothing waits.
    Names are shortened, never a figure."""
    parts = []
    if len(files) == 1:
        name, tokens = files[0]
        parts.append(f"{_clipped(name)} ({plural(tokens, 'token')})")
    elif files:
        parts.append(f"{len(files)} files ({plural(sum(t for _, t in files), 'token')})")
    if len(images) == 1:
        parts.append(_clipped(images[0]))
    elif images:
        parts.append(plural(len(images), "image"))
    return f"attached: {' · '.join(parts)}" if parts else None
