"""Claude Code (``@anthropic-ai/claude-code``), headless: ``claude -p PROMPT
--output-format json``, pointed at an Anthropic-compatible server by
``ANTHROPIC_BASE_URL`` (the interface is in ``real_agents/__init__.py``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from real_agents import MAX_OUTPUT_VARIABLE

NAME = "claude_code"
PACKAGE = "@anthropic-ai/claude-code"
VERSION = "2.1.328"
TOOL_CALL = {"name": "Bash", "arguments": {"command": "echo hi", "description": "Say hi"},
             "prompt": "Run echo hi", "expect": "hi"}
"""The call a scripted model makes to prove the client's tool loop: the client
runs it (``--allowedTools Bash``) and sends back a result holding ``expect``."""
OUTPUT_KEPT = 4000
"""Characters of the client's output a step keeps."""


def install(prefix: Path) -> Path:
    """``PREFIX/node_modules/.bin/claude``, installed there first when absent
    (the package ships a native binary as an optional dependency)."""
    binary = prefix / "node_modules" / ".bin" / "claude"
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


def environment(*, base_url: str, model: str, home: Path) -> dict[str, str]:
    """What the client reads: the server, a key it never checks, the model for
    the main and the small requests, no telemetry, a scratch HOME (and the
    reply length the benchmark asks for)."""
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "TERM") if k in os.environ}
    if os.environ.get(MAX_OUTPUT_VARIABLE):
        keep["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = os.environ[MAX_OUTPUT_VARIABLE]
    return {**keep, "HOME": str(home), "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": "dummy", "ANTHROPIC_MODEL": model,
            "ANTHROPIC_SMALL_FAST_MODEL": model,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def outcome(exit_code: int | None, stdout: str) -> tuple[bool, str | None]:
    """Whether the step ended with no API error, and else why (one line)."""
    if exit_code is None:
        return False, "timed out"
    try:
        result: Any = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        return False, f"exit {exit_code}, no JSON result"
    said = str(result.get("result", ""))
    if result.get("terminal_reason") == "api_error" or result.get("api_error_status") \
            or said.startswith("API Error"):
        return False, said.splitlines()[0][:300] if said else "API error"
    if exit_code != 0:
        return False, f"exit {exit_code}: {said[:200]}"
    return True, None


def run_step(binary: Path, *, base_url: str, model: str, workdir: Path, home: Path,
             prompt: str, first: bool, timeout_s: float) -> dict[str, Any]:
    argv = [str(binary), "-p", prompt, "--output-format", "json",
            "--allowedTools", "Bash", *([] if first else ["--continue"])]
    try:
        done = subprocess.run(argv, cwd=workdir, env=environment(
            base_url=base_url, model=model, home=home), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout_s)
        exit_code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        exit_code = None
        stdout = (exc.stdout or b"").decode("utf-8", "replace") \
            if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = ""
    ok, error = outcome(exit_code, stdout)
    return {"ok": ok, "error": error, "exit_code": exit_code,
            "output": (stdout + stderr)[-OUTPUT_KEPT:]}
