"""Codex CLI (``@openai/codex``), headless: ``codex exec --json PROMPT`` (then
``codex exec resume --last PROMPT``), pointed at an OpenAI Responses API
server by a model provider in ``$CODEX_HOME/config.toml`` (the interface is in
``real_agents/__init__.py``). Codex has no setting for the length of a reply:
``MAX_OUTPUT_VARIABLE`` changes nothing for it (the server's ``max_tokens``
bounds its replies)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

NAME = "codex_cli"
PACKAGE = "@openai/codex"
VERSION = "0.169.0"
TOOL_CALL = {"name": "exec_command", "arguments": {"cmd": "echo hi"},
             "prompt": "Run echo hi", "expect": "hi"}
"""The call a scripted model makes to prove the client's tool loop: Codex runs it
(``codex exec`` never asks) and sends back a function_call_output holding ``expect``."""
OUTPUT_KEPT = 4000
"""Characters of the client's output a step keeps."""


def install(prefix: Path) -> Path:
    """``PREFIX/node_modules/.bin/codex``, installed there first when absent
    (the package ships a native binary as an optional dependency)."""
    binary = prefix / "node_modules" / ".bin" / "codex"
    if binary.exists():
        return binary
    prefix.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                        f"{PACKAGE}@{VERSION}"], check=True, timeout=900,
                       stdin=subprocess.DEVNULL, capture_output=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"npm install of {PACKAGE}@{VERSION} failed: {exc}") from None
    if not binary.exists():
        raise RuntimeError(f"npm installed {PACKAGE} but {binary} is not there")
    return binary


def config_toml(*, base_url: str, model: str, context_window: int | None = None) -> str:
    """A model provider speaking the Responses API at ``base_url`` (no ``/v1``):
    no retries (an error shows at once), a stream idle timeout long enough for
    a long prompt read on a CPU, no update check, no analytics."""
    window = "" if context_window is None else (
        f"model_context_window = {context_window}\n"
        f"model_auto_compact_token_limit = {context_window * 9 // 10}\n")
    return (f'model = {json.dumps(model)}\nmodel_provider = "mlxchat"\n{window}'
            "check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n\n"
            '[model_providers.mlxchat]\nname = "mlxchat"\n'
            f'base_url = {json.dumps(base_url.rstrip("/") + "/v1")}\nwire_api = "responses"\n'
            "request_max_retries = 0\nstream_max_retries = 0\n"
            "stream_idle_timeout_ms = 3600000\n")


def environment(*, home: Path) -> dict[str, str]:
    """A scratch HOME with its CODEX_HOME inside (the config and transcripts)."""
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "TERM") if k in os.environ}
    return {**keep, "HOME": str(home), "CODEX_HOME": str(home / ".codex")}


def outcome(exit_code: int | None, stdout: str) -> tuple[bool, str | None]:
    """Whether the step ended with no API error, and else why (one line), from
    the JSON lines ``codex exec --json`` prints (``turn.completed`` or
    ``turn.failed``; a top-level ``error`` is a request that failed)."""
    if exit_code is None:
        return False, "timed out"
    events: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    kinds = [e.get("type") for e in events]
    errors = [str(e.get("message") or e.get("error") or "") for e in events
              if e.get("type") in ("error", "turn.failed")]
    if "turn.failed" in kinds or "turn.completed" not in kinds:
        said = errors[-1] if errors else f"exit {exit_code}, no turn.completed"
        return False, said.splitlines()[0][:300] if said else "API error"
    if exit_code != 0:
        return False, f"exit {exit_code}"
    return True, None


def run_step(binary: Path, *, base_url: str, model: str, workdir: Path, home: Path,
             prompt: str, first: bool, timeout_s: float,
             context_window: int | None = None) -> dict[str, Any]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(config_toml(
        base_url=base_url, model=model, context_window=context_window))
    resume = [] if first else ["resume", "--last"]
    argv = [str(binary), "exec", "--json", "--skip-git-repo-check", "--sandbox",
            "workspace-write", *resume, prompt]
    try:
        done = subprocess.run(argv, cwd=workdir, env=environment(home=home),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout_s)
        exit_code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        exit_code = None
        stdout = (exc.stdout or b"").decode("utf-8", "replace") \
            if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = ""
    ok, error = outcome(exit_code, stdout)
    return {"ok": ok, "error": error, "exit_code": exit_code,
            "output": (stdout + stderr)[-OUTPUT_KEPT:]}
