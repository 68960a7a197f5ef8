"""What real clients send (``data/clients``, recorded with their source and
version in its SOURCES.md): every field of every recorded body is one the
server knows, each is read as the client means it, and the server answers
each recorded request (its path, headers and fields; its long texts cut
short so the tiny model's window holds them) with a whole stream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxchat.server.anthropic.protocol import anthropic_chat
from mlxchat.server.anthropic.thinking import omits_thinking
from tests.server.conftest import serve
from tests.server.test_early_stream import events

DATA = Path(__file__).parent / "data" / "clients"
CLAUDE_CODE = sorted(DATA.glob("claude_code_*.json"))

# Every field the recordings hold; one not named here (a new client version's)
# fails the first test until the server is taught it.
KNOWN = {
    "body": {"model", "messages", "system", "tools", "metadata", "max_tokens", "thinking",
             "context_management", "output_config", "stream"},
    "role": {"user", "assistant", "system"},
    "block": {"text", "tool_use", "tool_result"},
    "block key": {"type", "text", "cache_control", "id", "name", "input", "tool_use_id",
                  "content", "is_error"},
    "tool key": {"name", "description", "input_schema", "defer_loading", "cache_control"},
    "thinking": {"type:adaptive", "display:omitted"},
    "output_config": {"effort:high"},
    "edit": {"clear_thinking_20251015"},
    "metadata": {"user_id"},
}


def _recorded(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _fields(body: dict[str, Any]) -> dict[str, set[str]]:
    blocks = [b for m in body["messages"] if isinstance(m["content"], list)
              for b in m["content"]] + list(body.get("system", []))
    return {
        "body": set(body), "role": {m["role"] for m in body["messages"]},
        "block": {b["type"] for b in blocks}, "block key": {k for b in blocks for k in b},
        "tool key": {k for t in body.get("tools", []) for k in t},
        "thinking": {f"{k}:{v}" for k, v in body["thinking"].items()},
        "output_config": {f"{k}:{v}" for k, v in body["output_config"].items()},
        "edit": {e["type"] for e in body["context_management"]["edits"]},
        "metadata": set(body["metadata"]),
    }


def test_claude_codes_recorded_requests_are_recorded_and_anonymised():
    assert len(CLAUDE_CODE) == 4
    for path in CLAUDE_CODE:
        text = path.read_text()
        assert "/home/user/project" in text and "/work/" not in text and "/tmp/" not in text


@pytest.mark.parametrize("path", CLAUDE_CODE, ids=lambda p: p.stem)
def test_every_field_claude_code_sends_is_known_and_read_as_meant(path):
    body = _recorded(path)["body"]
    for kind, names in _fields(body).items():
        assert names <= KNOWN[kind], (kind, names - KNOWN[kind])
    chat = anthropic_chat(body, None, window=32768)
    turn = chat.turn
    assert chat.stream and turn.fills_window  # max_tokens 32000 is a cap, never refused
    assert turn.settings["max_tokens"] == body["max_tokens"] == 32000
    # Adaptive thinking leaves the switch to the model; effort high is a budget.
    assert "thinking" not in turn.settings and turn.settings["reasoning_effort"] == "high"
    assert turn.settings["max_reasoning_tokens"] == 4 * 4096
    assert omits_thinking(body)
    assert turn.system == "\n\n".join(b["text"] for b in body["system"])
    assert turn.messages[1].role == "system"  # the environment, after the user's message
    deferred = [t for t in body["tools"] if t.get("defer_loading")]
    assert deferred and len(json.loads(turn.tools)) == len(body["tools"]) - len(deferred)


def _cut(value: Any, keep: int = 40) -> Any:
    """Every string cut to ``keep`` characters but names and ids: the same fields."""
    if isinstance(value, str):
        return value[:keep]
    if isinstance(value, list):
        return [_cut(v, keep) for v in value]
    if isinstance(value, dict):
        return {k: v if k in ("type", "role", "id", "name", "tool_use_id", "model")
                else _cut(v, keep) for k, v in value.items()}
    return value


@pytest.fixture
def small_window(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db", context_window=1024)
    yield running
    running.stop()


def test_the_server_answers_each_recorded_request_as_claude_code_sends_it(small_window):
    for path in CLAUDE_CODE:
        recorded = _recorded(path)
        body = {**_cut(recorded["body"]), "model": "tiny"}
        headers = {k: v for k, v in recorded["headers"].items()
                   if k.lower() not in ("host", "content-length", "accept-encoding",
                                        "connection")}
        with httpx.stream("POST", small_window.url + recorded["path"], json=body,
                          headers=headers, timeout=120) as reply:
            assert reply.status_code == 200, reply.read()
            seen = list(events(reply.iter_lines()))
        names = [name for name, _ in seen]
        assert names[0] == "message_start" and names[-1] == "message_stop", (path, names)
        assert "error" not in names, seen
        end = next(data for name, data in seen if name == "message_delta")
        # 32000 tokens asked of a 1,024-token window: the reply stops where it is full.
        assert end["delta"]["stop_reason"] in ("end_turn", "model_context_window_exceeded")
