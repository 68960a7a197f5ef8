"""Speculative decoding on this device: decode tok/s plain, with prompt lookup
and with the model as its own draft, interleaved in one run.

``spec_accept``: the share of proposed tokens accepted with the model as its own
draft (a sanity bound: a draft that is the model proposes what it samples).
``spec_speed``: decode tok/s with prompt lookup / plain, on a prompt whose
reply copies text of the prompt (lookup needs no second model, so this is the
verification cost alone; a separate draft model only adds its own passes).
Lookup on free text (a story, little to copy) is printed beside it.
"""

from __future__ import annotations

from dataclasses import replace

from common import median

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel
from mlxchat.turn_stats import TurnStats

PASSAGE = ("The keeper climbed the stairs at dusk, lit the lamp, wound the clockwork, "
           "and wrote the hour, the wind and the ships in the log.")
COPY = f"Copy this passage twice, word for word:\n\n{PASSAGE}"
FREE = "Tell me a long story about a lighthouse keeper."
RUNS = {"plain": (COPY, "off"), "lookup": (COPY, "lookup"), "draft": (COPY, "draft"),
        "free plain": (FREE, "off"), "free lookup": (FREE, "lookup")}


def _turn(loaded: LoadedModel, prompt: str, settings: GenerationSettings) -> TurnDone:
    engine = ChatEngine(loaded)
    try:
        if settings.speculative == "draft":
            engine.set_draft(loaded, "self")
        events = engine.turn([Message("user", prompt)], settings)
        return [e for e in events if isinstance(e, TurnDone)][0]
    finally:
        engine.close()


def _figures(s: TurnStats) -> str:
    return (f"{s.acceptance:.0%} of {s.draft_tokens_proposed} proposed accepted, "
            f"{s.tokens_per_pass:.2f} tok/pass")


def measure(loaded: LoadedModel, *, tokens: int, repeats: int) -> dict[str, float]:
    """Every configuration once per repeat, in rotating order; prints the figures."""
    greedy = GenerationSettings(temperature=0.0, max_tokens=tokens)
    tps: dict[str, list[float]] = {name: [] for name in RUNS}
    last: dict[str, TurnDone] = {}
    names = list(RUNS)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            prompt, mode = RUNS[name]
            last[name] = _turn(loaded, prompt, replace(greedy, speculative=mode))
            tps[name].append(last[name].stats.decode_tps)
    speed = {name: median(v) for name, v in tps.items()}
    same = (last["plain"].token_ids == last["lookup"].token_ids == last["draft"].token_ids
            and last["free plain"].token_ids == last["free lookup"].token_ids)
    print(f"speculative decode tok/s, a reply that copies the prompt: plain "
          f"{speed['plain']:.1f}  lookup {speed['lookup']:.1f} "
          f"({_figures(last['lookup'].stats)}; {speed['lookup'] / speed['plain']:.2f}x)  "
          f"self-draft {speed['draft']:.1f} ({_figures(last['draft'].stats)}; "
          f"{speed['draft'] / speed['plain']:.2f}x)")
    print(f"speculative decode tok/s, free text: plain {speed['free plain']:.1f}  lookup "
          f"{speed['free lookup']:.1f} ({_figures(last['free lookup'].stats)}; "
          f"{speed['free lookup'] / speed['free plain']:.2f}x); same tokens as plain: "
          f"{'yes' if same else 'NO'}")
    print(f"speculative=auto (the default) on this device: {_auto_verdict(loaded)}")
    return {"spec_accept": last["draft"].stats.acceptance,
            "spec_speed": speed["lookup"] / speed["plain"]}


def _auto_verdict(loaded: LoadedModel) -> str:
    """What auto measures after a first reply here, and what it decides."""
    engine = ChatEngine(loaded)
    try:
        events = engine.turn([Message("user", FREE)],
                             GenerationSettings(temperature=0.0, max_tokens=16))
        [e for e in events if isinstance(e, TurnDone)]
        engine.drop_cache()  # queued behind the measurement: it has run once this returns
        cost = engine.verify_cost()
        return "not measured (the reply was too short)" if cost is None else cost.words()
    finally:
        engine.close()
