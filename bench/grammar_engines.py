"""Grammar engines side by side: what each costs to build its token table,
to compile a mid-size JSON schema, and to compute one token's mask, with the
bundled model's tokenizer (49k pieces) and a 152k byte-level BPE vocabulary
of Qwen's size synthesized from it (no download).

    PYTHONPATH=app .venv/bin/python bench/grammar_engines.py [--model FOLDER]

Needs only ``tokenizers`` and ``numpy``; an engine that is not installed is
skipped and said so. xgrammar imports torch (and transformers) for its
tensor helpers only: install it into a separate venv (``pip install
--no-deps xgrammar apache-tvm-ffi`` beside ``pydantic numpy tokenizers``);
the bench then lends it stand-ins for both and hands its C++ matcher a
numpy bitmask through DLPack, so its own work is what is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np

MODEL = Path.home() / ".cache/mlxchat/models/b179c9523d0e6a0f-v3"
QWEN_PIECES = 151_643
"""Qwen2.5's ordinary pieces (its 22 control tokens come on top)."""
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


def byte_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte's stand-in character."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return {b: chr(b if b in kept else next(extra)) for b in range(256)}


def widened(tokenizer_json: str, pieces: int, seed: int = 0) -> str:
    """The tokenizer grown to ``pieces`` ordinary pieces by BPE merges of its
    own pieces (a frequent head joined to a short tail, as real merges go),
    each merge's parts in the vocabulary: a valid byte-level BPE of that size."""
    data = json.loads(tokenizer_json)
    model = data["model"]
    vocab: dict[str, int] = model["vocab"]
    merges = model["merges"]
    as_pairs = bool(merges) and isinstance(merges[0], list)
    specials = {t["content"] for t in data.get("added_tokens", [])}
    ordinary = [p for p, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if p not in specials]
    heads, tails = ordinary[:20_000], [p for p in ordinary[:4_000] if len(p) <= 3]
    rng = random.Random(seed)
    next_id = max(vocab.values()) + 1
    for added in data.get("added_tokens", []):
        next_id = max(next_id, added["id"] + 1)
    while len(vocab) - len(specials) < pieces:
        a, b = rng.choice(heads), rng.choice(tails)
        if a + b in vocab:
            continue
        vocab[a + b] = next_id
        next_id += 1
        merges.append([a, b] if as_pairs else f"{a} {b}")
    return json.dumps(data)


class Vocabulary:
    """A tokenizer as the engines take it: its JSON, each id's bytes, its end token."""

    def __init__(self, name: str, tokenizer_json: str):
        from tokenizers import Tokenizer
        self.name, self.json = name, tokenizer_json
        self.hf = Tokenizer.from_str(tokenizer_json)
        back = {c: b for b, c in byte_chars().items()}
        self.size = self.hf.get_vocab_size(with_added_tokens=True)
        self.specials = {t["id"] for t in json.loads(tokenizer_json).get("added_tokens", [])}
        self.bytes: list[bytes] = [b""] * self.size
        for piece, i in self.hf.get_vocab(with_added_tokens=True).items():
            if i not in self.specials and all(c in back for c in piece):
                self.bytes[i] = bytes(back[c] for c in piece)
        self.eos = min(self.specials) if self.specials else 0

    def ids(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids


def _timed(step: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = step()
    return out, time.perf_counter() - t0


def llguidance_engine(vocab: Vocabulary, ids: list[int]) -> tuple[float, float, list[float]]:
    import llguidance
    table, table_s = _timed(lambda: llguidance.LLTokenizer(vocab.json, eos_token=vocab.eos))

    def build() -> Any:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            MID_SCHEMA, defaults={"whitespace_flexible": False})
        return llguidance.LLMatcher(table, grammar, log_level=0)
    matcher, compile_s = _timed(build)
    bits = np.zeros((table.vocab_size + 31) // 32, dtype=np.int32)
    times = []
    for token in ids:
        times.append(_timed(lambda: matcher.unsafe_compute_mask_ptr(bits.ctypes.data,
                                                                    bits.nbytes))[1])
        assert matcher.consume_token(token), matcher.get_error()
    return table_s, compile_s, times


def outlines_engine(vocab: Vocabulary, ids: list[int]) -> tuple[float, float, list[float]]:
    import outlines_core as oc
    from outlines_core.json_schema import build_regex_from_schema
    by_bytes: dict[bytes, list[int]] = {}
    for i, piece in enumerate(vocab.bytes):
        if piece:
            by_bytes.setdefault(piece, []).append(i)
    table, table_s = _timed(lambda: oc.Vocabulary(vocab.eos, by_bytes))
    # Its index is built per schema: that build is its compile.
    guide, compile_s = _timed(lambda: oc.Guide(oc.Index(
        build_regex_from_schema(json.dumps(MID_SCHEMA)), table)))
    mask = np.zeros((1, (vocab.size + 31) // 32), dtype=np.int32)
    times = []
    for token in ids:
        times.append(_timed(lambda: guide.write_mask_into(mask.ctypes.data, mask.size,
                                                          mask.itemsize))[1])
        guide.advance(token)
    return table_s, compile_s, times


def _xgrammar() -> Any:
    """xgrammar, its torch and transformers imports met by stand-ins (it uses
    them for tensor helpers and Hugging Face loading, neither timed here)."""
    import tvm_ffi  # noqa: F401  - before the stand-ins: it probes a real torch

    class StandIn(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (), {})
    for name in ("torch", "transformers"):
        if name not in sys.modules:
            stand_in = StandIn(name)
            stand_in.int32 = "int32"  # type: ignore[attr-defined]
            stand_in.tensor = lambda *a, **k: None  # type: ignore[attr-defined]
            sys.modules[name] = stand_in
    import xgrammar
    return xgrammar


def xgrammar_engine(vocab: Vocabulary, ids: list[int]) -> tuple[float, float, list[float]]:
    xgr = _xgrammar()
    encoded = [piece or b"\x00<special>" for piece in vocab.bytes]

    def table() -> Any:
        info = xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=vocab.size,
                                 stop_token_ids=[vocab.eos])
        return xgr.GrammarCompiler(info, max_threads=1)
    compiler, table_s = _timed(table)
    compiled, compile_s = _timed(lambda: compiler.compile_json_schema(
        MID_SCHEMA, any_whitespace=False, separators=(",", ":")))
    matcher = xgr.GrammarMatcher(compiled)
    bits = np.zeros((1, (vocab.size + 31) // 32), dtype=np.int32)
    times = []
    for token in ids:
        times.append(_timed(lambda: matcher.fill_next_token_bitmask(bits))[1])
        assert matcher.accept_token(token), token
    return table_s, compile_s, times


ENGINES = {"llguidance": llguidance_engine, "outlines-core": outlines_engine,
           "xgrammar": xgrammar_engine}


def measure(vocab: Vocabulary) -> None:
    ids = vocab.ids(json.dumps(MID_INSTANCE, separators=(",", ":")))
    print(f"{vocab.name}: {vocab.size:,} pieces; the reply walked is {len(ids)} tokens")
    for name, engine in ENGINES.items():
        try:
            table_s, compile_s, times = engine(vocab, ids)
        except ImportError as exc:
            print(f"  {name:13} not installed here ({exc.name})")
            continue
        print(f"  {name:13} table_ms={table_s * 1000:9.1f}  compile_ms={compile_s * 1000:8.1f}  "
              f"mask_ms mean={statistics.mean(times) * 1000:.3f} "
              f"median={statistics.median(times) * 1000:.3f} max={max(times) * 1000:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=MODEL,
                        help="a model folder with a byte-level BPE tokenizer.json")
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    text = (args.model / "tokenizer.json").read_text(encoding="utf-8")
    measure(Vocabulary("bundled", text))
    measure(Vocabulary("qwen-size", widened(text, QWEN_PIECES)))


if __name__ == "__main__":
    main()
