"""Which default sampling makes a small model answer simple questions in English.

Ten simple questions through the real engine on a model (default: the bundled
SmolLM2-135M), each answered with every candidate setting and several seeds.
An answer counts as English when most of its words are plain ASCII and at
least two of them are among the commonest English words (or it is three words
or fewer); as right when it names the expected word. Prints one line per candidate, side by side with
today's default (temperature 0.7, top_p 1.0) measured in the same run, and
the ratio that matters: english_rate against the baseline's.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/sampling.py [--model SPEC] [--seeds N]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))

from mlxchat.chat import Message  # noqa: E402
from mlxchat.engine.core import ChatEngine  # noqa: E402
from mlxchat.engine.events import TurnDone  # noqa: E402
from mlxchat.generation import GenerationSettings  # noqa: E402

QUESTIONS = [
    ("What is the capital of France?", "paris"),
    ("What color is the sky on a clear day?", "blue"),
    ("How many legs does a dog have?", "four|4"),
    ("What is the opposite of hot?", "cold"),
    ("What do bees make?", "honey"),
    ("Which planet do we live on?", "earth"),
    ("What is frozen water called?", "ice"),
    ("How many days are in a week?", "seven|7"),
    ("What animal says moo?", "cow"),
    ("What is two plus two?", "four|4"),
]
COMMON = set("the a an is are of and to in it that this on for with as be by you i".split())
CANDIDATES = [
    ("baseline 0.7 / 1.0", dict(temperature=0.7, top_p=1.0, min_p=0.0)),
    ("0.2 / 0.9", dict(temperature=0.2, top_p=0.9, min_p=0.0)),
    ("0.3 / 0.9 / min_p 0.1", dict(temperature=0.3, top_p=0.9, min_p=0.1)),
    ("0.5 / 0.9 / min_p 0.1", dict(temperature=0.5, top_p=0.9, min_p=0.1)),
    ("0.1 / 0.9 / min_p 0.1", dict(temperature=0.1, top_p=0.9, min_p=0.1)),
    ("0.2 / 0.9 / min_p 0.2", dict(temperature=0.2, top_p=0.9, min_p=0.2)),
    ("greedy", dict(temperature=0.0, top_p=1.0, min_p=0.0)),
]


def english(text: str) -> bool:
    words = re.findall(r"[^\W\d_]+", text.lower())
    if not words:
        return False
    ascii_share = sum(w.isascii() for w in words) / len(words)
    # A terse answer ('Paris.', 'Four legs.') has no room for the common words.
    return ascii_share >= 0.9 and (sum(w in COMMON for w in words) >= 2 or len(words) <= 3)


def right(text: str, expected: str) -> bool:
    return re.search(rf"\b({expected})\b", text.lower()) is not None


def answer(engine: ChatEngine, question: str, settings: GenerationSettings) -> str:
    events = engine.turn([Message("user", question)], settings)
    done = next(e for e in events if isinstance(e, TurnDone))
    return done.reply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--only", nargs="*", default=None,
                        help="run only these candidates (by label), beside the baseline")
    args = parser.parse_args()
    from mlxchat.models import load_model

    engine = ChatEngine(load_model(args.model))
    base = GenerationSettings(max_tokens=args.max_tokens)
    rates: dict[str, tuple[float, float]] = {}
    try:
        for label, sampling in CANDIDATES:
            if args.only and label != CANDIDATES[0][0] and label not in args.only:
                continue
            seeds = [0] if sampling["temperature"] == 0 else list(range(args.seeds))
            n = en = ok = 0
            start = time.perf_counter()
            for question, expected in QUESTIONS:
                for seed in seeds:
                    reply = answer(engine, question, replace(base, seed=seed, **sampling))
                    n += 1
                    en += english(reply)
                    ok += english(reply) and right(reply, expected)
            rates[label] = (en / n, ok / n)
            print(f"{label:24} english {en}/{n} ({en / n:.0%})  right {ok}/{n} ({ok / n:.0%})  "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    finally:
        engine.close()
    baseline = rates[CANDIDATES[0][0]]
    print("ratios: " + " ".join(
        f"{label.split()[0]}_english_ratio={en / max(baseline[0], 1e-9):.2f}"
        for label, (en, _) in rates.items() if label != CANDIDATES[0][0]))


if __name__ == "__main__":
    main()
