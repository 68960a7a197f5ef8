"""A tool call through the real Codex CLI: `codex exec` against the real
server (in this process, on 127.0.0.1) whose model is a tiny random Qwen3 on
Qwen3's real template, its replies scripted (the tests' ``Scripted``: the
model still runs, only the choice of each token is the script's): first an
``exec_command`` call, which Codex runs and sends back as a
``function_call_output``, then a line of text that ends the turn.

    PYTHONPATH=app:. .venv/bin/python bench/codex_tool_call.py [--prefix NPM_PREFIX]

Prints each request's prompt, prefilled and reused tokens, whether Codex
ended without an API error, whether the command's output came back, and
``codex_tool_call_prefill_ratio``: tokens the request with the tool's output
prefilled / the tokens that output added (goal <= 1.1), with the load.
Codex's prompt is ~38k tokens of this tiny model's byte-level vocabulary: its
first prefill takes minutes on a busy 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from real_agents import codex_cli  # noqa: E402

from mlxchat.models import load_folder  # noqa: E402

from tests.families.builders import FAMILIES, with_template, write_family_model  # noqa: E402
from tests.scripted import Scripted  # noqa: E402
from tests.server.conftest import serve  # noqa: E402

WINDOW = 65536
CALL = ('<tool_call>\n{"name": "exec_command", "arguments": {"cmd": "echo scripted-call-ran"}}'
        '\n</tool_call>')


def tiny_qwen3(folder: Path):
    real = Path(__file__).parents[1] / "tests" / "families" / "real_templates" / "qwen3.jinja"
    base = next(f for f in FAMILIES if f.name == "qwen3")
    family = with_template("qwen3", real.read_text(),
                           config={**base.config, "max_position_embeddings": WINDOW})
    return load_folder(write_family_model(family, folder), name="tiny", spec="tiny")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", type=Path,
                        default=Path(tempfile.gettempdir()) / "mlxchat-agents")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    binary = codex_cli.install(args.prefix)
    scratch = Path(tempfile.mkdtemp(prefix="mlxchat-codex-call-"))
    workdir, home = scratch / "project", scratch / "home"
    workdir.mkdir()
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    os.environ["MLXCHAT_HOME"] = str(scratch / "mlxchat")
    model = tiny_qwen3(scratch / "model")
    patch = pytest.MonkeyPatch()
    served = serve(model, scratch / "s.db", max_tokens=200, max_body_bytes=16 << 20)
    try:
        Scripted(model.tokenizer, patch).replies(CALL, "The command ran.")
        step = codex_cli.run_step(binary, base_url=served.url, model="tiny", workdir=workdir,
                                  home=home, prompt="Run the command, then stop.",
                                  first=True, timeout_s=args.timeout, context_window=WINDOW)
        store = served.conv.store
        messages = store.get_session(served.conv.session.id).messages
    finally:
        served.stop()
        patch.undo()
    replies = [m for m in messages if m.role == "assistant"]
    results = [m for m in messages if m.role == "tool"]
    for reply in replies:
        s = reply.stats
        if s is not None:
            print(f"request: prompt {s.prompt_tokens:,}, prefilled {s.prefilled_tokens:,}, "
                  f"reused {s.reused_tokens:,}, generated {s.generated_tokens:,}")
    ran = bool(results) and "scripted-call-ran" in results[0].content
    print(f"codex ended without an API error: {step['ok']} ({step['error'] or 'ok'})")
    print(f"exec_command's output came back: {ran} "
          f"({json.dumps(results[0].content[:120]) if results else 'no tool result'})")
    if len(replies) == 2 and replies[1].stats is not None and results:
        added = len(results[0].token_ids or [])
        ratio = replies[1].stats.prefilled_tokens / max(added, 1)
        print(f"codex_tool_call_prefill_ratio: {ratio:.3f} ({replies[1].stats.prefilled_tokens:,}"
              f" prefilled / {added:,} added; goal <= 1.1)")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average: {load}")
    if not (step["ok"] and ran):
        print(step["output"][-2000:])
        raise SystemExit(1)


if __name__ == "__main__":
    main()
