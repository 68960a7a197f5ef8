"""``speculative=auto``: prompt lookup where this device verifies proposals
cheaply, plain decoding where it does not, decided by measuring.

Verifying k proposed tokens is one forward pass of k+1 tokens. On Apple GPUs
decoding is bound by memory bandwidth and that pass costs about one decode
step; on the CPU build a quantized matmul is bound by compute and it costs
about k+1. Once per loaded model (and per k), after a reply of a few tokens,
the engine times that pass on the live cache at its real context length
(then trims it off again) against the reply's own decode step. Lookup is used
when the pass costs at most ``PAYS_BELOW`` steps: it then wins whenever more
than that many tokens are accepted per pass on average, and loses little when
none are. With a fixed seed auto stays plain, so a seed gives the same reply
whatever was measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import trim_prompt_cache

from mlxchat.engine.kv import prompt_cache

PAYS_BELOW = 1.5
"""A verifying pass may cost at most this many decode steps for auto to use lookup."""
MIN_STEPS = 3
"""A reply needs this many decode steps before its step time is trusted."""


@dataclass(frozen=True)
class VerifyCost:
    """What verifying proposals costs on this device, measured."""

    proposed: int
    """k: the pass timed fed k+1 tokens."""
    ratio: float
    """That pass's time over one decode step's."""
    context: int
    """Tokens in the cache when it was measured."""

    @property
    def pays(self) -> bool:
        return self.ratio <= PAYS_BELOW

    def words(self) -> str:
        verdict = ("prompt lookup is on" if self.pays else
                   "plain decoding is faster here, so auto stays off")
        return (f"verifying {self.proposed} proposed tokens costs {self.ratio:.1f} decode "
                f"steps on this device (measured at {self.context:,} tokens of context; "
                f"auto uses lookup at {PAYS_BELOW:g} or less): {verdict}")


def measure(model: Any, layers: list[Any], *, proposed: int, step_s: float) -> VerifyCost:
    """Time a pass of ``proposed + 1`` tokens on ``layers`` and trim it off.
    The faster of two passes counts (the first may build kernels)."""
    context = prompt_cache.offset(layers)
    x = mx.zeros((1, proposed + 1), dtype=mx.int32)
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        mx.eval(model(x, cache=layers))
        best = min(best, time.perf_counter() - t0)
        trim_prompt_cache(layers, proposed + 1)
        if best / step_s <= PAYS_BELOW:
            break  # a warm-up can only have made it look dearer
    return VerifyCost(proposed=proposed, ratio=best / step_s, context=context)
