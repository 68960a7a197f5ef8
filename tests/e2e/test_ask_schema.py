"""`mlxchat ask --schema FILE.json` on a tiny model: the reply follows the
schema; a missing, broken or uncompilable file is one line and exit status 2."""

from __future__ import annotations

import json

import jsonschema
import pytest

from mlxchat import cli
from mlxchat.engine.turn.constrained import SPECULATION_OFF

SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 5},
    "rain": {"type": "boolean"},
    "temp": {"type": "integer", "minimum": -20, "maximum": 45}},
    "required": ["city", "rain", "temp"], "additionalProperties": False}


def ask(capsys, model_dir, *args: str) -> tuple[int, str, str]:
    code = cli.main(["ask", "--model", str(model_dir), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_reply_follows_the_schema(capsys, tiny_model_dir, tmp_path):
    path = tmp_path / "weather.json"
    path.write_text(json.dumps(SCHEMA))
    ended = 0
    for seed in range(3):
        code, out, _ = ask(capsys, tiny_model_dir, "--schema", str(path), "--json",
                           "--temp", "1", "--seed", str(seed), "--max-tokens", "120",
                           "Weather?")
        assert code == 0
        data = json.loads(out)
        assert data["reply"].startswith("{")
        assert data["spec_off_reason"] == SPECULATION_OFF  # speculative=auto, said why off
        if data["finish_reason"] == "stop":
            ended += 1
            jsonschema.validate(json.loads(data["reply"]), SCHEMA)
    assert ended >= 1


@pytest.mark.parametrize("content, words", [
    (None, "No such file"),
    ("{not json", "not JSON"),
    ("[1, 2]", "a JSON schema is an object"),
    ('{"$ref": "#/nowhere"}', "does not exist"),
])
def test_a_bad_schema_file_is_one_line_and_exit_2(capsys, tiny_model_dir, tmp_path,
                                                  content, words):
    path = tmp_path / "schema.json"
    if content is not None:
        path.write_text(content)
    code, out, err = ask(capsys, tiny_model_dir, "--schema", str(path), "hi")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"mlxchat: error: --schema {path}") and words in err
