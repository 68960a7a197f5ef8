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

import resource
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
    switches: float
    """Context switches of the process (every thread's), per token."""
    tokens: int


def _span(stamps: Iterable[int]) -> Span:
    """``stamps`` yields the tokens generated so far at each sighting."""
    first = last = None
    for count in stamps:
        use = resource.getrusage(resource.RUSAGE_SELF)
        now = (time.perf_counter(), time.process_time(), use.ru_nvcsw + use.ru_nivcsw, count)
        first = first or now
        last = now
    assert first is not None and last is not None and last[3] > first[3]
    n = last[3] - first[3]
    return Span(*((b - a) / n for a, b in zip(first[:3], last[:3])), n)


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
    """``repeats`` pairs of runs, one of each side (which goes first
    alternates): the medians of each pair's difference in ms per token (a
    pair runs close in time, under about the same load), and the engine's
    share of raw speed from the medians of each side."""
    settings = GenerationSettings(temperature=0.0, max_tokens=tokens, speculative="off")
    ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}],
                                               add_generation_prompt=True)
    _span(_engine_counts(loaded, settings))  # its first turn places the layers (cpu_matmul)
    pairs: list[tuple[Span, Span]] = []
    for i in range(repeats):
        runs = [lambda: _span(_engine_counts(loaded, settings)),
                lambda: _span(_raw_counts(loaded, ids, tokens))]
        got = [run() for run in (runs if i % 2 else runs[::-1])]
        pairs.append((got[0], got[1]) if i % 2 else (got[1], got[0]))
    ours, raw = [p[0] for p in pairs], [p[1] for p in pairs]
    print(f"decode over {min(s.tokens for s in ours + raw)}+ tokens, medians of {repeats}: "
          f"engine {median([s.wall for s in ours]) * 1e3:.3f} ms/token wall, "
          f"{median([s.cpu for s in ours]) * 1e3:.3f} cpu; raw mlx_lm "
          f"{median([s.wall for s in raw]) * 1e3:.3f} wall, "
          f"{median([s.cpu for s in raw]) * 1e3:.3f} cpu; context switches a token "
          f"{median([s.switches for s in ours]):.2f} vs {median([s.switches for s in raw]):.2f}")
    return {"engine_overhead_ms_per_token": median([a.wall - b.wall for a, b in pairs]) * 1e3,
            "engine_overhead_cpu_ms_per_token": median([a.cpu - b.cpu for a, b in pairs]) * 1e3,
            "engine_speed_share": median([s.wall for s in raw]) / median([s.wall for s in ours])}
