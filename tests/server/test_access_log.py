"""The server logs one line per request (method, path, status, session,
reused/prompt tokens, prefilled and generated tokens, time to first token, time) and starts without transformers' PyTorch advice."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import anyio

from mlxchat.server.core.access_log import AccessLog, note_first_token, note_turn
from mlxchat.turn_stats import TurnStats
from tests.server.conftest import request
from tests.server.test_serve import _turn, client
from tests.waiting import until


def test_each_request_is_one_line_with_its_session_and_tokens(served, caplog):
    caplog.set_level(logging.INFO, logger="mlxchat.server.access")
    api = client(served.url)
    messages = [{"role": "system", "content": "Be brief."}]
    first = _turn(api, messages, "Tell me about herons.")
    second = _turn(api, messages, "And their nests?")
    missing = request(served.url, "GET", "/v1/nothing")

    def logged() -> list[str]:  # written once the response went out
        return [r.getMessage() for r in caplog.records if r.name == "mlxchat.server.access"]
    until(lambda: len(logged()) >= 3)
    lines = logged()
    chats = [line for line in lines if line.startswith("POST /v1/chat/completions 200 ")]
    assert len(chats) == 2, lines
    session = served.conv.store.list_sessions()[0].id
    for line, usage in zip(chats, (first, second)):
        cached = usage.prompt_tokens_details.cached_tokens
        assert f" session=#{session} cached={cached:,}/{usage.prompt_tokens:,} " in line, line
        assert f" prefilled={usage.prompt_tokens - cached:,} " \
            f"generated={usage.completion_tokens:,} ttft=" in line, line
        assert line.endswith(" s")
    assert missing.status == 404 and any(line.startswith("GET /v1/nothing 404 ")
                                         for line in lines), lines


def test_importing_the_model_stack_prints_no_pytorch_advice():
    proc = subprocess.run([sys.executable, "-c", "import mlxchat, mlx_lm"], capture_output=True,
                          text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "PyTorch" not in proc.stderr, proc.stderr


def test_a_turns_ttft_is_counted_from_the_requests_arrival(caplog):
    """What a request waited before its turn began (the queue, the fit check,
    its KV read from disk after a restart) is in its ttft: the engine's own
    figure (0.01 s here) counts only from the turn's start."""
    caplog.set_level(logging.INFO, logger="mlxchat.server.access")

    async def answer(scope, receive, send):
        began = time.monotonic()  # at or after the request's arrival
        note_turn(3, TurnStats(prompt_tokens=10, ttft_s=0.01))
        note_first_token(began + 5.0)  # its first token came 5 s after
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        pass

    anyio.run(AccessLog(answer), {"type": "http", "method": "POST",
                                  "path": "/v1/messages"}, receive, send)
    logged = [r.getMessage() for r in caplog.records if r.name == "mlxchat.server.access"]
    ttft = float(logged[-1].split(" ttft=")[1].split(" s")[0])
    assert ttft >= 5.0, logged
