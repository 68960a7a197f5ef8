"""Output that follows a JSON schema: what each grammar engine's token mask
costs, and what a schema costs the engine's decode and buys in valid replies.

    PYTHONPATH=app .venv/bin/python bench/schema.py [--model FOLDER] [--schemas 20]

Prints, with the bundled model's tokenizer (49k pieces):
- per engine (``grammar_engines``: llguidance, outlines-core, xgrammar where
  installed): its token table, its compile of a mid-size schema, and its
  per-token mask; ``mask_apply_ms[engine]``: the engine's processor
  (llguidance's mask applied to the logits) per token;
- ``schema_decode_ratio``: decode tok/s with a schema / without (same prompt,
  same run, turns alternating: the median of the pairs' ratios);
- ``schema_valid``: of N schemas x 3 prompts, the fraction of replies that
  ended by themselves and validate (``jsonschema``), and how many ended.

The engine uses llguidance (engine/turn/constrained.py says why in full).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.engine.turn.constrained import OutputFormat, compile_format
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder

sys.path.insert(0, str(Path(__file__).parent))
import grammar_engines  # noqa: E402
from grammar_engines import MID_INSTANCE, MID_SCHEMA, MODEL  # noqa: E402


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def engine_mask_apply(tokenizer: Any, ids: list[int]) -> float:
    """What the engine's processor adds to a decode step: the mask, unpacked
    and applied to a row of logits (evaluated)."""
    import mlx.core as mx
    processor = compile_format(tokenizer, OutputFormat(MID_SCHEMA)).processor()
    logits = mx.random.normal((1, len(tokenizer.get_vocab())))
    mx.eval(logits)
    times = []
    for token in ids:
        t0 = time.perf_counter()
        mx.eval(processor.masked(logits))
        times.append(time.perf_counter() - t0)
        processor.matcher.consume_token(token)
    return statistics.mean(times)


def mask_costs(tokenizer: Any, folder: Path) -> None:
    """Each engine's table, compile and mask (``grammar_engines``), then the
    engine's own processor per token."""
    text = (folder / "tokenizer.json").read_text(encoding="utf-8")
    grammar_engines.measure(grammar_engines.Vocabulary("bundled", text))
    ids = tokenizer.encode(json.dumps(MID_INSTANCE, separators=(",", ":")),
                           add_special_tokens=False)
    applied = engine_mask_apply(tokenizer, ids)
    print(f"mask_apply_ms[engine] = {_ms(applied)}   (llguidance's mask applied to the "
          "logits by the engine's processor, per token)")


def _turn(engine: ChatEngine, text: str, settings: GenerationSettings,
          schema: dict | None) -> TurnDone:
    output = None if schema is None else compile_format(engine.loaded.tokenizer,
                                                        OutputFormat(schema))
    events = engine.turn([Message("user", text)], settings, output=output)
    return [ev for ev in events if isinstance(ev, TurnDone)][0]


def decode_ratio(engine: ChatEngine, rounds: int) -> None:
    """Free and constrained turns alternating (same prompt, same length): the
    ratio of their decode rates, pair by pair, and its median."""
    text = "Describe a made-up person as JSON: id, name, email, roles, address, score, tags."
    settings = GenerationSettings(temperature=0.0, max_tokens=96, speculative="off")
    free, fixed = [], []
    for _ in range(rounds):
        engine.drop_cache()
        free.append(_turn(engine, text, settings, None).stats)
        engine.drop_cache()
        fixed.append(_turn(engine, text, settings, MID_SCHEMA).stats)
    tps = statistics.median(s.decode_tps for s in free if s.decode_tps)
    tps_schema = statistics.median(s.decode_tps for s in fixed if s.decode_tps)
    pairs = [b.decode_tps / a.decode_tps for a, b in zip(free, fixed) if a.decode_tps]
    print(f"decode tok/s: {tps:.1f} free, {tps_schema:.1f} with the schema "
          f"(tokens {[s.generated_tokens for s in free]} / {[s.generated_tokens for s in fixed]}; "
          f"pair ratios {[round(r, 3) for r in pairs]}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    print(f"schema_decode_ratio = {statistics.median(pairs):.3f}")


def _schemas() -> list[dict]:
    return json.loads((Path(__file__).parent / "data" / "schemas.json").read_text())


PROMPTS = ["Answer with JSON only.",
           "A customer record for a small bookshop, as JSON.",
           "Fill this in for a sunny day in Lisbon. Reply in JSON."]


def validity(engine: ChatEngine, count: int) -> None:
    settings = GenerationSettings(max_tokens=200, seed=0, speculative="off")
    ended = valid = total = 0
    for schema in _schemas()[:count]:
        for prompt in PROMPTS:
            done = _turn(engine, f"{prompt}\nSchema: {json.dumps(schema)}", settings, schema)
            total += 1
            if done.stats.finish_reason != "stop":
                continue
            ended += 1
            try:
                jsonschema.validate(json.loads(done.reply), schema)
                valid += 1
            except (ValueError, jsonschema.ValidationError) as exc:
                print(f"  invalid: {done.reply[:80]!r}: {str(exc).splitlines()[0]}")
    print(f"replies: {total}, ended by themselves: {ended}, valid of those: {valid}")
    print(f"schema_valid = {valid / max(ended, 1):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=MODEL, help="an MLX model folder")
    parser.add_argument("--schemas", type=int, default=20, help="schemas for schema_valid (0: leave it out)")
    parser.add_argument("--rounds", type=int, default=3, help="turns each way for the ratio")
    args = parser.parse_args()
    loaded = load_folder(args.model)
    mask_costs(loaded.tokenizer, args.model)
    engine = ChatEngine(loaded)
    try:
        decode_ratio(engine, args.rounds)
        if args.schemas:
            validity(engine, args.schemas)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
