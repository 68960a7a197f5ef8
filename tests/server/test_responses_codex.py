"""Codex CLI's own requests (recorded from ``codex exec`` 0.169.0, with paths
and ids replaced: ``data/clients/SOURCES.md``), without node: every field
read, and the session replayed against the real server with the model's
replies scripted (an ``exec_command`` call, then text) pays only what each
request adds, found by the ledger under Codex's ``prompt_cache_key``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxchat.models import load_folder
from mlxchat.server.responses.items import read_input
from mlxchat.server.responses.fields import RESPONSES
from mlxchat.server.responses.protocol import read_request

from tests.families.builders import FAMILIES, with_template, write_family_model
from tests.scripted import Scripted
from tests.server.conftest import request, serve

CLIENTS = Path(__file__).parent / "data" / "clients"
STEPS = ("codex-first", "codex-tool-result", "codex-resume")
KEY = b"k" * 32
CALL = ('<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "echo hello-from-tool"}}'
        '\n</tool_call>')


def recorded(name: str) -> dict:
    return json.loads((CLIENTS / f"{name}.json").read_text())["body"]


@pytest.mark.parametrize("name", STEPS)
def test_every_field_codex_sends_is_read(name):
    body = recorded(name)
    assert set(body) <= set(RESPONSES.served) | set(RESPONSES.ignored), set(body)
    parsed = read_request(body, None, window=32768)
    assert (parsed.stream, parsed.store, parsed.summary, parsed.sealed, parsed.one_call) \
        == (True, False, True, True, False)
    assert parsed.session == "prompt_cache_key " + body["prompt_cache_key"]
    assert parsed.settings == {} and parsed.tools.choice.name is None
    defined = [t["function"]["name"] for t in json.loads(parsed.tools.definitions)]
    assert {"exec_command", "write_stdin", "view_image", "close_agent"} <= set(defined)
    assert "web_search" not in defined  # a built-in tool, left out
    assert parsed.tools.call_name("close_agent") == ("close_agent", "multi_agent_v1")
    read = read_input(body, tools=parsed.tools, key=KEY, instructions=parsed.instructions)
    developer = [i for i in body["input"] if i.get("role") == "developer"]
    assert len(developer) == 2 and read.system == "\n\n".join(
        part["text"] for item in developer for part in item["content"])
    user = read.messages[0]
    assert user.role == "user" and user.content.startswith("<environment_context>")
    assert user.content.endswith("Run echo to say hello, then stop.")
    assert [i["id"] for i in read.listed] == [i["id"] for i in body["input"]]


def test_the_later_requests_carry_the_call_its_output_and_the_reply():
    parsed = read_request(recorded("codex-resume"), None)
    read = read_input(recorded("codex-resume"), tools=parsed.tools, key=KEY)
    roles = [m.role for m in read.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    _, called, result, replied, asked = read.messages
    assert [(c.name, c.arguments, c.id) for c in called.calls] \
        == [("exec_command", {"cmd": "echo hello-from-tool"}, "call_1")]
    assert (result.call_id, result.tool_name) == ("call_1", "exec_command")
    assert "hello-from-tool" in result.content
    assert (replied.content, asked.content) == ("All done.", "Now say bye.")
    # The reasoning items were another server's: left aside, never refused.
    assert called.reasoning is None and replied.reasoning is None


def _shortened(value, longest: int = 160):
    """The recorded body with every long text cut (the tiny test model reads a
    byte a token): the same fields, items and order."""
    if isinstance(value, str):
        return value[:longest]
    if isinstance(value, list):
        return [_shortened(v, longest) for v in value]
    if isinstance(value, dict):
        return {k: v if k in ("call_id", "arguments", "id", "prompt_cache_key") else
                _shortened(v, longest) for k, v in value.items()}
    return value


def _events(reply) -> list[dict]:
    return [json.loads(line[6:]) for line in reply.lines() if line.startswith("data: ")]


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    real = Path(__file__).parents[1] / "families" / "real_templates" / "qwen3.jinja"
    base = next(f for f in FAMILIES if f.name == "qwen3")
    family = with_template("qwen3", real.read_text(),
                           config={**base.config, "max_position_embeddings": 16384})
    return load_folder(write_family_model(family, tmp_path_factory.mktemp("qwen3-codex")),
                       name="tiny", spec="tiny")


def test_a_codex_session_replayed_pays_only_what_each_request_adds(qwen3, tmp_path,
                                                                    monkeypatch):
    served = serve(qwen3, tmp_path / "s.db", max_tokens=200, max_body_bytes=16 << 20)
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    try:
        usages = []
        for name, reply in zip(STEPS, (CALL, "All done.", "Bye.")):
            scripted.reply(reply)
            body = {**_shortened(recorded(name)), "model": "tiny"}
            answer = request(served.url, "POST", "/v1/responses", body, timeout_s=300)
            assert answer.status == 200, answer.body[:300]
            events = _events(answer)
            assert [e["sequence_number"] for e in events] == list(range(len(events)))
            assert events[-1]["type"] == "response.completed"
            usages.append(events[-1]["response"]["usage"])
            stats = served.conv.turns.last_stats
            assert usages[-1]["input_tokens_details"]["cached_tokens"] == stats.reused_tokens
            if len(usages) > 1:
                before = usages[-2]
                assert stats.reused_tokens == before["input_tokens"] + before["output_tokens"]
                assert stats.prefilled_tokens == len(served.conv.messages[-2].token_ids)
        output = events[-1]["response"]["output"]
        assert [o["type"] for o in output] == ["message"]
        messages = served.conv.store.get_session(served.conv.session.id).messages
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant",
                                              "user", "assistant"]
        assert messages[1].tool_calls[0].name == "exec_command"
    finally:
        served.stop()
