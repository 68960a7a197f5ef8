"""Speculative decoding on this device: decode tok/s plain, with prompt lookup
and with the model as its own draft, interleaved in one run.

``spec_accept``: the share of proposed tokens accepted with the model as its own
draft (a sanity bound: a draft that is the model proposes what it samples).
``spec_speed``: decode tok/s with prompt lookup / plain, on a prompt whose
reply copies text of the prompt (lookup needs no second model, so this is the
verification cost alone; a separate draft model only adds its own passes).
Lookup on free text (a story, little to copy) is printed beside it.
``auto_speed``: decode tok/s under ``speculative=auto`` over plain decoding's
in a chat of a few replies (``auto_chat``).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))  # run alone too

from common import median  # noqa: E402

from mlxchat.chat import Message  # noqa: E402
from mlxchat.engine.core import ChatEngine  # noqa: E402
from mlxchat.engine.events import TurnDone  # noqa: E402
from mlxchat.generation import GenerationSettings  # noqa: E402
from mlxchat.models import LoadedModel  # noqa: E402
from mlxchat.turn_stats import TurnStats  # noqa: E402

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
            "spec_speed": speed["lookup"] / speed["plain"],
            **auto_chat(loaded, tokens=tokens)}


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


def auto_chat(loaded: LoadedModel, *, tokens: int, turns: int = 4) -> dict[str, float]:
    """A chat of ``turns`` replies under auto and the same under plain decoding,
    alternating reply by reply, on a prompt to copy then free text: the modes
    auto chose and its decode speed over plain's (``auto_speed``: never far
    below 1, as auto switches lookup on only where it measured a gain)."""
    engines = {mode: ChatEngine(loaded) for mode in ("auto", "off")}
    rates: dict[str, list[float]] = {"auto": [], "off": []}
    chosen = []
    prompts = [COPY] + [f"{FREE} Part {n}." for n in range(1, turns)]
    history: dict[str, list[Message]] = {mode: [] for mode in engines}
    try:
        for prompt in prompts:
            for mode, engine in engines.items():
                msgs = history[mode] + [Message("user", prompt)]
                settings = GenerationSettings(temperature=0.0, max_tokens=tokens,
                                              speculative=mode)
                done = [e for e in engine.turn(msgs, settings) if isinstance(e, TurnDone)][0]
                history[mode] = msgs + [Message("assistant", done.reply)]
                rates[mode].append(done.stats.decode_tps or 0.0)
                if mode == "auto":
                    chosen.append(done.stats.spec_mode)
        cost = engines["auto"].verify_cost()
    finally:
        for engine in engines.values():
            engine.close()
    ratio = sum(rates["auto"]) / max(sum(rates["off"]), 1e-9)
    print(f"speculative=auto over a {turns}-reply chat (copy, then free text): modes "
          f"{', '.join(chosen)}; decode {median(rates['auto']):.1f} vs plain "
          f"{median(rates['off']):.1f} tok/s (median), auto_speed {ratio:.2f}; "
          f"{'not measured' if cost is None else cost.words()}")
    return {"auto_speed": ratio}


def main() -> None:
    """Alone: ``bench/speculation.py [--model smollm2-135m] [--tokens 96] [--repeats 3]``."""
    import argparse
    import os

    from common import pick_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    figures = measure(pick_model(args.model), tokens=args.tokens, repeats=args.repeats)
    print("ratios: " + " ".join(f"{k}={v:.3f}" for k, v in figures.items())
          + f" load={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
