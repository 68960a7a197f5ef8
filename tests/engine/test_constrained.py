"""Replies that follow a JSON schema, on a tiny random model: whatever the
random weights prefer, every reply that ends by itself parses and validates."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import jsonschema
import pytest

from mlxchat.chat import Message
from mlxchat.engine.events import TurnDone
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.engine.turn.constrained import (
    SPECULATION_OFF,
    OutputFormat,
    SchemaError,
    compile_format,
)
from mlxchat.generation import GenerationSettings

SCHEMAS = [
    {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4},
                 "minItems": 1, "maxItems": 3}},
     "required": ["color", "tags"], "additionalProperties": False},
    {"type": "object", "properties": {
        "point": {"type": "object", "properties": {
            "x": {"type": "integer", "minimum": -5, "maximum": 5},
            "y": {"type": "integer", "minimum": -5, "maximum": 5}},
            "required": ["x", "y"], "additionalProperties": False},
        "ok": {"type": "boolean"}},
     "required": ["point", "ok"], "additionalProperties": False},
    {"type": "array", "items": {"enum": [1, 2, 3]}, "maxItems": 4},
]
SAMPLED = GenerationSettings(temperature=1.0, max_tokens=160, seed=7, speculative="off")


def constrained_turn(engine, schema, settings=SAMPLED, text="Give me JSON.") -> TurnDone:
    output = compile_format(engine.loaded.tokenizer, OutputFormat(schema))
    events = engine.turn([Message("user", text)], settings, output=output)
    done = [ev for ev in events if isinstance(ev, TurnDone)]
    assert len(done) == 1
    return done[0]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_reply_that_ends_validates(engine, schema):
    ended = 0
    for seed in range(4):
        done = constrained_turn(engine, schema, replace(SAMPLED, seed=seed))
        if done.stats.finish_reason != "stop":
            continue
        ended += 1
        jsonschema.validate(json.loads(done.reply), schema)
        assert done.token_ids[-1] in engine.loaded.tokenizer.eos_token_ids
    assert ended >= 1  # not vacuous: the grammar's end lets the model stop


def test_the_ledger_holds_the_constrained_reply(engine):
    """The reply's tokens are what the cache holds, and a prompt that extends
    them (as the token ledger lays out the next turn) reuses every one."""
    done = constrained_turn(engine, SCHEMAS[2], replace(SAMPLED, seed=1))
    held = engine.cached_tokens
    assert held[-len(done.token_ids):] == done.token_ids
    follow = FittedPrompt([*held, 10, 20, 30], [], 0)
    again = [ev for ev in engine.turn(follow, replace(SAMPLED, max_tokens=4))
             if isinstance(ev, TurnDone)][0]
    assert again.stats.reused_tokens == len(held)


def test_speculation_turns_off_and_says_why(engine):
    done = constrained_turn(engine, SCHEMAS[0], replace(SAMPLED, speculative="lookup"))
    assert done.stats.spec_mode == "off"
    assert done.stats.spec_off_reason == SPECULATION_OFF
    free = [ev for ev in engine.turn([Message("user", "hi")], replace(SAMPLED, max_tokens=4))
            if isinstance(ev, TurnDone)][0]
    assert free.stats.spec_off_reason is None


def test_json_object_gives_an_object(engine):
    done = constrained_turn(engine, OutputFormat.any_object().schema,
                            replace(SAMPLED, max_tokens=400, temperature=0.0))
    if done.stats.finish_reason == "stop":
        assert isinstance(json.loads(done.reply), dict)
    else:
        assert done.reply.startswith("{")


@pytest.mark.parametrize("schema, words", [
    ({"$ref": "#/$defs/missing"}, "does not exist"),
    ({"type": "string", "pattern": "(((("}, "cannot be compiled"),
    ({"type": "object", "properties": {"a": {"type": "strin"}}}, "cannot be compiled"),
])
def test_a_schema_that_cannot_compile_is_refused(tiny, schema, words):
    with pytest.raises(SchemaError, match=words):
        compile_format(tiny.tokenizer, OutputFormat(schema))


HOSTILE = r"""
import json, sys
from mlxchat.engine.turn.constrained import OutputFormat, SchemaError, compile_format
from mlxchat.models import load_folder
tok = load_folder(sys.argv[1]).tokenizer
schemas = [
    {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
     "$ref": "#/$defs/n"},
    {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(10_000)},
     "required": [f"p{i}" for i in range(10_000)]},
    {"type": "string", "pattern": "(a|b)*c" * 150_000},
    {"type": "string", "pattern": "[a-z]{1,1000}" * 60},
    {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(5_000)},
     "required": [f"p{i}" for i in range(5_000)]},
    {"type": "string", "pattern": "(a|b)*c" * 28_000},
    {"type": "string", "pattern": "((a{1,50}){1,50}){1,50}"},
]
for schema in schemas:
    try:
        compile_format(tok, OutputFormat(schema))
        print("compiled")
    except SchemaError as exc:
        print("refused:", exc)
"""


def test_hostile_schemas_end_in_bounded_time_and_memory(tiny):
    """Recursive refs, 10k (and 5k) properties, a 1 MB (and 200 kB) pattern, nested
    quantifiers: each compiled or refused with a reason, in a process capped at
    2 GB that must end within the timeout."""
    folder = tiny.info.path
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
    run = subprocess.run([sys.executable, "-c", limit + HOSTILE, folder], capture_output=True,
                         text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert len(lines) == 7
    assert all(line == "compiled" or line.startswith("refused: ") for line in lines)
    assert lines[2].startswith("refused: the schema is")  # a 1 MB pattern is never read
