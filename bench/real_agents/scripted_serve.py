"""Test-only: ``mlxchat serve`` on a tiny random model whose replies are
scripted, so a real client's tool loop can be proven without a model that
chooses to call tools. The model runs and its cache holds what it wrote; only
the choice of each token is the script's (``tests/scripted.py``, as the
suite steers replies). Each reply in turn is one of ``--reply`` (a call is
written as the generic tool prompt's ``<tool_call>JSON</tool_call>``, which
the server gives back as the API's tool call); the last repeats.

    PYTHONPATH=app:. .venv/bin/python bench/real_agents/scripted_serve.py \\
        --reply '<tool_call>{"name": "Bash", "arguments": {"command": "echo hi"}}</tool_call>' \\
        --reply 'Done.' [--window 65536] [serve's flags ...]

It writes its tiny model in a scratch folder and serves it on 127.0.0.1 with
``mlxchat serve``'s own code (its flags pass through; ``--port 0`` by default).
Nothing of it is part of mlxchat: it is for benchmarks and proofs only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "app"))


class _Patch:
    """The one method of pytest's monkeypatch that ``Scripted`` uses."""

    @staticmethod
    def setattr(target: Any, name: str, value: Any) -> None:
        setattr(target, name, value)


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """A call as the generic tool prompt writes it."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reply", action="append", required=True)
    parser.add_argument("--window", type=int, default=65536,
                        help="the tiny model's context window (a client's prompt must fit)")
    args, serve_args = parser.parse_known_args()
    from mlxchat.cli.main import main as mlxchat
    from mlxchat.models import load_folder
    from mlxchat.models.tiny import write_tiny_model

    from tests.scripted import Scripted

    folder = write_tiny_model(Path(tempfile.mkdtemp(prefix="mlxchat-scripted-")),
                              context_window=args.window)
    scripted = Scripted(load_folder(folder).tokenizer, _Patch())
    replies = args.reply + [args.reply[-1]] * 64  # the last repeats
    scripted.replies(*replies)
    if "--port" not in serve_args:
        serve_args += ["--port", "0"]
    return mlxchat(["serve", "--model", str(folder), *serve_args])


if __name__ == "__main__":
    raise SystemExit(main())
