"""The engine's own time per decoded token above mlx-lm's raw loop
(``stream_generate``), same model, prompt and greedy tokens, alternating.

Each side is timed from its first streamed token to its last, as a caller
sees them (for the engine: ``TextDelta`` events on the caller's thread,
which carry the tokens generated so far): wall seconds and the process's
CPU seconds (every thread's), per token. The wall figure is what a user
feels; the CPU one holds better on a busy machine, where the wall figure
swings with what else runs: both are printed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from common import median

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TextDelta
from mlxchat.generation import GenerationSettings

PROMPT = "Tell me a long story about a lighthouse keeper."


@dataclass(frozen=True)
class Span:
    """Seconds per token between a stream's first token and its last."""

    wall: float
    cpu: float
    tokens: int


def _span(stamps: Iterable[int]) -> Span:
    """``stamps`` yields the tokens generated so far at each sighting."""
    first = last = None
    for count in stamps:
        now = (time.perf_counter(), time.process_time(), count)
        first = first or now
        last = now
    assert first is not None and last is not None and last[2] > first[2]
    n = last[2] - first[2]
    return Span((last[0] - first[0]) / n, (last[1] - first[1]) / n, n)


def _engine_counts(loaded: Any, settings: GenerationSettings) -> Iterator[int]:
    engine = ChatEngine(loaded)
    try:
        for event in engine.turn([Message("user", PROMPT)], settings):
            if isinstance(event, TextDelta):
                yield event.generated_tokens
    finally:
        engine.close()


def _raw_counts(loaded: Any, ids: list[int], tokens: int) -> Iterator[int]:
    from mlx_lm import stream_generate

    for n, _ in enumerate(stream_generate(loaded.model, loaded.tokenizer, ids,
                                          max_tokens=tokens), start=1):
        yield n


def measure(loaded: Any, *, tokens: int = 256, repeats: int = 5) -> dict[str, float]:
    """Medians of ``repeats`` alternating runs of each side (which goes first
    alternates too), in ms per token, and the engine's share of raw speed."""
    settings = GenerationSettings(temperature=0.0, max_tokens=tokens, speculative="off")
    ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}],
                                               add_generation_prompt=True)
    _span(_engine_counts(loaded, settings))  # its first turn places the layers (cpu_matmul)
    ours: list[Span] = []
    raw: list[Span] = []
    for i in range(2 * repeats):
        if i % 2 == (i // 2) % 2:
            raw.append(_span(_raw_counts(loaded, ids, tokens)))
        else:
            ours.append(_span(_engine_counts(loaded, settings)))
    wall = {side: median([s.wall for s in spans]) for side, spans in (("ours", ours),
                                                                       ("raw", raw))}
    cpu = {side: median([s.cpu for s in spans]) for side, spans in (("ours", ours),
                                                                     ("raw", raw))}
    print(f"decode over {min(s.tokens for s in ours + raw)}+ tokens, median of {repeats}: "
          f"engine {wall['ours'] * 1e3:.3f} ms/token wall, {cpu['ours'] * 1e3:.3f} cpu; "
          f"raw mlx_lm {wall['raw'] * 1e3:.3f} wall, {cpu['raw'] * 1e3:.3f} cpu")
    return {"engine_overhead_ms_per_token": (wall["ours"] - wall["raw"]) * 1e3,
            "engine_overhead_cpu_ms_per_token": (cpu["ours"] - cpu["raw"]) * 1e3,
            "engine_speed_share": wall["raw"] / wall["ours"]}
