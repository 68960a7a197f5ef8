"""`mlxchat serve --context N`: each conversation's window capped at N tokens
(or at the settings file's ``context_window``; the flag wins), and every part
of the server using that window: the 400 for a prompt it cannot hold, where a
reply stops, Ollama's ``/api/show``, admission's KV per member and the start
line. Conversations stored without a cap (an earlier run's) are served at it."""

from __future__ import annotations

import importlib
import subprocess
import sys

import anyio
import pytest

from mlxchat.paths import config_file
from mlxchat.server.core.admission import admission_for
from mlxchat.server.core.errors import ApiError
from mlxchat.server.options import ServeOptions

from tests.server.conftest import open_tiny, request, serve

cli = importlib.import_module("mlxchat.cli.main")  # the package re-exports main()
serve_cli = importlib.import_module("mlxchat.cli.serve")

CAP = 256
CHAT = "/v1/chat/completions"
FIRST = [{"role": "user", "content": "hi"}]


@pytest.fixture
def launched(monkeypatch):
    """The settings `run_app` would have been started with (no terminal, no model)."""
    calls: list = []
    monkeypatch.setattr(cli, "_need_terminal", lambda: None)
    monkeypatch.setattr("mlxchat.tui.app.run_app",
                        lambda settings, **kw: calls.append(settings) or 0)
    return calls


def _stored_uncapped_then_capped(tiny, tmp_path):
    """A conversation stored by a run without a cap; the same store served at CAP.
    Returns (the capped server, the conversation so far)."""
    db = tmp_path / "s.db"
    first = serve(tiny, db)
    try:
        reply = request(first.url, "POST", CHAT, {"model": "tiny", "messages": FIRST,
                                                   "max_tokens": 4, "temperature": 0})
        assert reply.status == 200, reply.body[:300]
        said = reply.json()["choices"][0]["message"]["content"]
    finally:
        first.stop()
    return serve(tiny, db, context_window=CAP), FIRST + [{"role": "assistant", "content": said}]


def test_a_context_past_the_models_window_is_one_line_and_exit_status_2(tiny_model_dir):
    """Known once the model is loaded (the tiny one's window is 2,048); a value
    below 256 or not a number is refused before any load (test_serve_tui_cli)."""
    proc = subprocess.run([sys.executable, "-m", "mlxchat", "serve", "--model",
                           str(tiny_model_dir), "--port", "0", "--context", "4096"],
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("mlxchat: error: --context can only lower")
    assert "window of 2,048 tokens; got 4,096" in proc.stderr and proc.stderr.count("\n") == 1


def test_the_flag_caps_the_window_over_the_settings_file(launched):
    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[generation]\ncontext_window = 1024\n")
    assert cli.main(["serve", "--tui", "--port", "0", "--context", "300"]) == 0
    assert cli.main(["serve", "--tui", "--port", "0"]) == 0
    assert [s.generation.context_window for s in launched] == [300, 1024]


def test_a_prompt_over_the_cap_is_a_400_naming_the_window(tiny, tmp_path):
    """Under the model's window (2,048) but over the cap, in a conversation an
    uncapped run stored and in a new one."""
    served, so_far = _stored_uncapped_then_capped(tiny, tmp_path)
    long = {"role": "user", "content": "word " * 120}  # ~600 tokens of the tiny model's
    try:
        for messages in (so_far + [long], [long]):
            reply = request(served.url, "POST", CHAT, {"model": "tiny", "messages": messages,
                                                        "max_tokens": 4})
            assert reply.status == 400, reply.body[:300]
            error = reply.json()["error"]
            assert error["code"] == "context_length_exceeded"
            assert f"context window is {CAP:,} tokens" in error["message"], error
        # Refused before it queues, from a floor computed without tokenizing (5,000
        # bytes are at least 385 tokens of the tiny model's), at the capped window.
        with pytest.raises(ApiError) as refused:
            anyio.run(served.service.check_fits, ["word " * 1000])
        assert refused.value.status == 400 and f"is {CAP:,} tokens" in str(refused.value)
    finally:
        served.stop()


def test_a_reply_stops_where_the_capped_window_is_full(tiny, tmp_path):
    served, so_far = _stored_uncapped_then_capped(tiny, tmp_path)
    try:
        reply = request(served.url, "POST", CHAT, {
            "model": "tiny", "max_tokens": 240, "temperature": 0,
            "messages": so_far + [{"role": "user", "content": "go on"}]})
        assert reply.status == 200, reply.body[:300]
        body = reply.json()
        usage = body["usage"]
        assert body["choices"][0]["finish_reason"] == "length"
        assert usage["prompt_tokens"] > 0  # the conversation stored was found and continued
        assert usage["prompt_tokens_details"]["cached_tokens"] > 0
        assert CAP <= usage["prompt_tokens"] + usage["completion_tokens"] <= CAP + 1
        assert usage["max_tokens_capped_to"] == CAP - usage["prompt_tokens"] + 1
        anthropic = request(served.url, "POST", "/v1/messages", {
            "model": "tiny", "max_tokens": 240, "temperature": 0,
            "messages": [{"role": "user", "content": "hi"}]})
        assert anthropic.json()["stop_reason"] == "model_context_window_exceeded"
        responses = request(served.url, "POST", "/v1/responses", {
            "model": "tiny", "input": "hi", "max_output_tokens": 240, "temperature": 0}).json()
        assert responses["status"] == "incomplete"
        assert CAP <= responses["usage"]["total_tokens"] <= CAP + 1
    finally:
        served.stop()


def test_ollama_show_and_ps_report_the_cap(tiny, tmp_path):
    served = serve(tiny, tmp_path / "s.db", context_window=CAP)
    try:
        show = request(served.url, "POST", "/api/show", {"model": "tiny"}).json()
        assert show["model_info"]["llama.context_length"] == CAP
        assert ["num_ctx", str(CAP)] in [line.split() for line in show["parameters"].splitlines()]
        assert request(served.url, "GET", "/api/ps").json()["models"][0]["context_length"] \
            == CAP
    finally:
        served.stop()


def test_admission_fits_more_members_at_a_smaller_window(tiny, tmp_path):
    """`serve --context 512` reserves each member's KV at 512 tokens: four times
    as many fit in the memory two fit at the model's 2,048."""
    conv = open_tiny(tiny, tmp_path / "s.db")
    try:
        engine = conv.engine
        memory = 2 * engine.kv_bytes_per_token() * 2048
        args = cli.build_parser().parse_args(["serve", "--context", "512"])
        capped = serve_cli.served_settings(args, conv.settings)
        assert admission_for(engine, conv.settings, 8, memory).members_fit() == 2
        assert admission_for(engine, capped, 8, memory).members_fit() == 8
        line = serve_cli.start_line("tiny", "http://127.0.0.1:1", ServeOptions(), 8,
                                    engine.prompts.window(capped.generation))
        assert "8 at once, 512 tokens of context each" in line
    finally:
        conv.shutdown()
