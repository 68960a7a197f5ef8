"""``speculative=auto``: prompt lookup where it measurably decodes faster than
plain decoding, plain decoding everywhere else.

Two things decide whether lookup pays, and both are measured. What verifying
k proposed tokens costs: one forward pass of k+1 tokens, about one decode
step on Apple GPUs (bound by memory bandwidth), up to k+1 on the CPU build
(bound by compute); once per loaded model (and per k), after a plain reply
of a few tokens, the engine times that pass on the live cache (then trims it
off again) against the reply's own decode step. And how many proposals the
model keeps: lookup is replayed over each reply as it was decoded (the
proposals it would have made from the prompt and the reply so far, and how
many the reply's own tokens confirm), which prices the reply in decode
steps both ways. Lookup is used for the next reply when that replay says it
is at least ``MARGIN`` times faster; after a reply decoded with lookup, its
measured speed against the last plain reply's corrects the replay's
forecast from then on, so lookup does not stay on where it measurably loses
(judged by the pass cost alone, lookup stayed on at 11% of proposals kept and
decoded at 20.0 tok/s against plain decoding's 41.6). With a fixed seed auto stays plain, so a seed gives
the same reply whatever was measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

import mlx.core as mx
from mlx_lm.models.cache import trim_prompt_cache

from mlxchat.engine.kv import prompt_cache
from mlxchat.engine.speculative.lookup import Proposer

MARGIN = 1.1
"""Lookup is used when it is forecast to decode at least this much faster."""
MIN_STEPS = 3
"""A reply needs this many decode steps before its step time is trusted."""


@dataclass(frozen=True)
class LookupChoice:
    """What auto decides for the next reply, from what it measured."""

    speedup: float | None = None
    """Plain decoding's steps over lookup's, replayed on the last reply at the
    measured pass cost, corrected by ``calibration`` (None: no reply replayed)."""
    accepted: float = 0.0
    """Of the proposals the replay made, the share the reply confirmed."""
    calibration: float = 1.0
    """The last lookup reply's measured speed over the plain reply's before it,
    over the speedup its replay forecast (at most 1; 1 until lookup ran)."""
    plain_tps: float | None = None
    """The last plain reply's decode speed under auto."""

    @property
    def pays(self) -> bool:
        return self.speedup is not None and self.speedup >= MARGIN

    def after(self, *, mode: str, decode_tps: float, history: Sequence[int],
              reply: Sequence[int], proposed: int, ratio: float) -> LookupChoice:
        """The choice once a reply decoded in ``mode`` at ``decode_tps``."""
        forecast, accepted = replayed_speedup(history, reply, k=proposed, ratio=ratio)
        calibration, plain = self.calibration, self.plain_tps
        if mode == "lookup" and plain:
            calibration = min(1.0, max(0.05, decode_tps / plain / forecast))
        elif mode == "off":
            plain = decode_tps
        return LookupChoice(forecast * calibration, accepted, calibration, plain)

    def words(self) -> str:
        if self.speedup is None:
            return "no reply replayed yet"
        verdict = ("prompt lookup is on" if self.pays else
                   "plain decoding is faster here, so auto stays off")
        corrected = ("" if self.calibration == 1.0 else
                     f", corrected by lookup's measured speed (x{self.calibration:.2f})")
        return (f"replayed on the last reply, lookup keeps {self.accepted:.0%} of its "
                f"proposals: {self.speedup:.2f}x plain decoding{corrected}; auto uses it "
                f"at {MARGIN:g}x or more: {verdict}")


@dataclass(frozen=True)
class VerifyCost:
    """What verifying proposals costs on this device, measured, and what auto
    made of it with the replies since."""

    proposed: int
    """k: the pass timed fed k+1 tokens."""
    ratio: float
    """That pass's time over one decode step's."""
    context: int
    """Tokens in the cache when it was measured."""
    choice: LookupChoice = LookupChoice()

    @property
    def pays(self) -> bool:
        """Whether the next reply under auto decodes with lookup."""
        return self.choice.pays

    def after(self, **reply: Any) -> VerifyCost:
        """With the choice updated by a reply (``LookupChoice.after``)."""
        return replace(self, choice=self.choice.after(proposed=self.proposed, ratio=self.ratio,
                                                      **reply))

    def words(self) -> str:
        return (f"verifying {self.proposed} proposed tokens costs {self.ratio:.1f} decode "
                f"steps on this device (measured at {self.context:,} tokens of context); "
                f"{self.choice.words()}")


def replayed_speedup(history: Sequence[int], reply: Sequence[int], *, k: int,
                     ratio: float) -> tuple[float, float]:
    """(plain decoding's steps over lookup's for ``reply`` after ``history``,
    the share of proposals kept): lookup's proposals replayed over the reply,
    a pass of d proposals priced ``1 + (ratio - 1) * d / k`` steps."""
    proposer = Proposer(history)
    at, steps, proposed, kept = 0, 0.0, 0, 0
    while at < len(reply):
        drafts = proposer.propose(min(k, len(reply) - at - 1))
        n = 0
        while n < len(drafts) and drafts[n] == reply[at + n]:
            n += 1
        steps += 1 + (ratio - 1) * len(drafts) / k
        proposed, kept = proposed + len(drafts), kept + n
        proposer.extend(reply[at:at + n + 1])
        at += n + 1
    return (len(reply) / steps if steps else 1.0), (kept / proposed if proposed else 0.0)


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
    return VerifyCost(proposed=proposed, ratio=best / step_s, context=context)
