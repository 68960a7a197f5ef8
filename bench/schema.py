"""Output that follows a JSON schema: what each grammar engine's token mask
costs, and what a schema costs the engine's decode and buys in valid replies.

    PYTHONPATH=app .venv/bin/python bench/schema.py [--model FOLDER] [--schemas 20]

Prints, with the bundled model's tokenizer (49k pieces):
- ``mask_ms[ENGINE]``: per-token mask time walking a valid reply to a
  mid-size schema (llguidance; outlines-core; xgrammar where it imports),
  and ``compile_ms[ENGINE]`` for that schema; ``mask_apply_ms[engine]``: the
  engine's processor (llguidance's mask applied to the logits) per token;
- ``schema_decode_ratio``: decode tok/s with a schema / without (same prompt,
  same run, medians of alternating turns);
- ``schema_valid``: of N schemas x 3 prompts, the fraction of replies that
  ended by themselves and validate (``jsonschema``), and how many ended.

The engine uses llguidance: compiles a hundred times faster than outlines-core
here, a mask that is noise beside a decode step, and resource limits on
hostile schemas (engine/turn/constrained.py says why in full).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.engine.turn.constrained import OutputFormat, compile_format, grammar_tokenizer
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder

MODEL = Path.home() / ".cache/mlxchat/models/b179c9523d0e6a0f-v3"
MID_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": ["id", "name", "email", "roles", "address", "active", "score", "tags"],
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "name": {"type": "string", "maxLength": 40},
        "email": {"type": "string", "pattern": "^[a-z0-9.]+@[a-z0-9]+\\.[a-z]{2,4}$"},
        "roles": {"type": "array", "items": {"enum": ["admin", "editor", "viewer"]},
                  "maxItems": 3},
        "address": {"type": "object", "additionalProperties": False,
                    "required": ["street", "city", "zip"],
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                   "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}},
        "active": {"type": "boolean"},
        "score": {"type": "number", "minimum": 0, "maximum": 100},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    },
}
MID_INSTANCE = {"id": 42, "name": "Ada Lovelace", "email": "ada@example.org",
                "roles": ["admin", "viewer"],
                "address": {"street": "12 Analytical Row", "city": "London", "zip": "10001"},
                "active": True, "score": 97.5, "tags": ["math", "engines", "poetry"]}


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def llguidance_cost(tokenizer: Any, ids: list[int]) -> tuple[float, float]:
    grammar_tokenizer(tokenizer)  # the token table is built once per model, not per schema
    t0 = time.perf_counter()
    compiled = compile_format(tokenizer, OutputFormat(MID_SCHEMA))
    compile_s = time.perf_counter() - t0
    matcher = compiled.matcher.deep_copy()
    bits = np.zeros((compiled.vocab + 31) // 32, dtype=np.int32)
    times = []
    for token in ids:
        t0 = time.perf_counter()
        matcher.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
        times.append(time.perf_counter() - t0)
        assert matcher.consume_token(token), matcher.get_error()
    return compile_s, statistics.mean(times)


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte's stand-in character."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return {b: chr(b if b in kept else next(extra)) for b in range(256)}


def _byte_vocabulary(tokenizer: Any) -> dict[bytes, list[int]]:
    """Each ordinary piece as the bytes it stands for (GPT-2 byte-level pieces)."""
    back = {c: b for b, c in _byte_chars().items()}
    hf = tokenizer._tokenizer
    special = set(hf.all_special_ids)
    out: dict[bytes, list[int]] = {}
    for piece, i in hf.get_vocab().items():
        if i in special or any(c not in back for c in piece):
            continue
        out.setdefault(bytes(back[c] for c in piece), []).append(i)
    return out


def outlines_cost(tokenizer: Any, ids: list[int]) -> tuple[float, float]:
    import outlines_core as oc
    from outlines_core.json_schema import build_regex_from_schema
    vocab = oc.Vocabulary(tokenizer.eos_token_id, _byte_vocabulary(tokenizer))
    t0 = time.perf_counter()
    guide = oc.Guide(oc.Index(build_regex_from_schema(json.dumps(MID_SCHEMA)), vocab))
    compile_s = time.perf_counter() - t0
    mask = np.zeros((1, (len(tokenizer.get_vocab()) + 31) // 32), dtype=np.int32)
    times = []
    for token in ids:
        t0 = time.perf_counter()
        guide.write_mask_into(mask.ctypes.data, mask.size, mask.itemsize)
        times.append(time.perf_counter() - t0)
        guide.advance(token)
    return compile_s, statistics.mean(times)


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


def mask_costs(tokenizer: Any) -> None:
    text = json.dumps(MID_INSTANCE, separators=(",", ":"))
    ids = tokenizer.encode(text, add_special_tokens=False)
    print(f"vocabulary: {len(tokenizer.get_vocab()):,} pieces; reply walked: {len(ids)} tokens")
    engines = {"llguidance": llguidance_cost, "outlines-core": outlines_cost}
    for name, measure in engines.items():
        try:
            compile_s, mask_s = measure(tokenizer, ids)
        except Exception as exc:  # an engine that does not work here is reported, not fatal
            print(f"{name}: not measured ({type(exc).__name__}: {exc})")
            continue
        print(f"compile_ms[{name}] = {_ms(compile_s)}   mask_ms[{name}] = {_ms(mask_s)}")
    applied = engine_mask_apply(tokenizer, ids)
    print(f"mask_apply_ms[engine] = {_ms(applied)}   (llguidance's mask applied to the "
          "logits by the engine's processor, per token)")
    try:
        import xgrammar  # noqa: F401
        print("xgrammar: imports, not measured by this bench")
    except Exception as exc:
        print(f"xgrammar: not measured ({type(exc).__name__}: {exc}; it needs torch)")


def _turn(engine: ChatEngine, text: str, settings: GenerationSettings,
          schema: dict | None) -> TurnDone:
    output = None if schema is None else compile_format(engine.loaded.tokenizer,
                                                        OutputFormat(schema))
    events = engine.turn([Message("user", text)], settings, output=output)
    return [ev for ev in events if isinstance(ev, TurnDone)][0]


def decode_ratio(engine: ChatEngine, rounds: int) -> None:
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
    print(f"decode tok/s: {tps:.1f} free, {tps_schema:.1f} with the schema "
          f"(tokens {[s.generated_tokens for s in free]} / {[s.generated_tokens for s in fixed]})")
    print(f"schema_decode_ratio = {tps_schema / tps:.3f}")


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
    parser.add_argument("--schemas", type=int, default=20, help="schemas for schema_valid")
    parser.add_argument("--rounds", type=int, default=3, help="turns each way for the ratio")
    args = parser.parse_args()
    loaded = load_folder(args.model)
    mask_costs(loaded.tokenizer)
    engine = ChatEngine(loaded)
    try:
        decode_ratio(engine, args.rounds)
        validity(engine, args.schemas)
    finally:
        engine.close()


if __name__ == "__main__":
    main()
