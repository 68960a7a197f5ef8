"""Speculative decoding on this device: decode tok/s plain, with prompt lookup
and with the model as its own draft, interleaved in one run.

``spec_accept``: the share of proposed tokens accepted with the model as its own
draft (a sanity bound: a draft that is the model proposes what it samples).
``spec_speed``: decode tok/s with prompt lookup / plain, on a prompt whose
reply repeats text of the prompt (lookup needs no second model, so this is
the verification cost alone; a separate draft model only adds its own passes).
"""

from __future__ import annotations

from dataclasses import replace

from common import median

from mlxchat.chat import GenerationSettings, Message
from mlxchat.engine import ChatEngine, TurnDone
from mlxchat.models.info import LoadedModel

PASSAGE = ("The keeper climbed the stairs at dusk, lit the lamp, wound the clockwork, "
           "and wrote the hour, the wind and the ships in the log.")
PROMPT = f"Copy this passage twice, word for word:\n\n{PASSAGE}"


def _turn(loaded: LoadedModel, settings: GenerationSettings, draft: bool) -> TurnDone:
    engine = ChatEngine(loaded)
    try:
        if draft:
            engine.set_draft(loaded, "self")
        events = engine.turn([Message("user", PROMPT)], settings)
        return [e for e in events if isinstance(e, TurnDone)][0]
    finally:
        engine.close()


def measure(loaded: LoadedModel, *, tokens: int, repeats: int) -> dict[str, float]:
    """Plain, lookup and self-draft turns in rotating order; prints the figures."""
    plain = GenerationSettings(temperature=0.0, max_tokens=tokens)
    modes = {"plain": (plain, False), "lookup": (replace(plain, speculative="lookup"), False),
             "draft": (replace(plain, speculative="draft"), True)}
    tps: dict[str, list[float]] = {m: [] for m in modes}
    stats, ids = {}, {}
    names = list(modes)
    for r in range(repeats):
        for name in names[r % 3:] + names[:r % 3]:
            done = _turn(loaded, *modes[name])
            tps[name].append(done.stats.decode_tps)
            stats[name], ids[name] = done.stats, done.token_ids
    speed = {m: median(v) for m, v in tps.items()}
    look, self_draft = stats["lookup"], stats["draft"]
    print(f"speculative decode tok/s: plain {speed['plain']:.1f}  lookup {speed['lookup']:.1f} "
          f"({look.acceptance:.0%} of {look.draft_tokens_proposed} proposed accepted, "
          f"{look.tokens_per_pass:.2f} tok/pass)  self-draft {speed['draft']:.1f} "
          f"({self_draft.acceptance:.0%} accepted, {self_draft.tokens_per_pass:.2f} tok/pass; "
          f"{speed['draft'] / speed['plain']:.2f}x); same tokens as plain: "
          f"{'yes' if ids['lookup'] == ids['plain'] == ids['draft'] else 'NO'}")
    return {"spec_accept": self_draft.acceptance, "spec_speed": speed["lookup"] / speed["plain"]}
