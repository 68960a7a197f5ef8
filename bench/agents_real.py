"""The real coding agents against `mlxchat serve`: each client module under
``bench/real_agents/`` (their interface is in its ``__init__.py``) is found or
installed in a folder of its own (``npm install --prefix``, never globally),
then run headless on a small task in a scratch git repository, several steps,
each continuing the session, with the server (127.0.0.1, a free port, a
scratch data folder) restarted before one of them.

    PYTHONPATH=app .venv/bin/python bench/agents_real.py --model SPEC
        [--clients claude_code,...] [--steps 3] [--restart-before 3]
        [--prefix DIR] [--max-output 64] [--timeout 3600] [--tool-prompt generic]
        [--server-log FILE] [--no-tool-loop]

``--model``: an alias, folder or .gguf whose window holds the clients'
prompts (Claude Code's is ~14k tokens on Gemma 3 with ``--tool-prompt
generic``, Codex's ~11k). ``--max-output`` caps each reply through the
client's own setting (``REAL_AGENT_MAX_OUTPUT``, which each client module maps
to its own) and the server's ``max_tokens`` (for a client with no such
setting: Codex), so a small model's words do not take the run's time.

Prints per step and request what the server's access log says (prompt
tokens, prefilled, reused, time to first token from the request's arrival)
and whether the client ended without an API error; then ``real_agents_ok``
(clients whose every step ended without one), per client
``real_agent_prefill_ratio`` (tokens prefilled / tokens new, over the
requests after the first step's; goal <= 1.1) and
``real_agent_restart_ratio`` (time to first token of the first request after
the restart / of the first request of the step before it; goal <= 1.5), with
the load average. Then each client's tool loop against a tiny model whose
replies are scripted (``real_agents/scripted_serve.py``): it calls the
client's tool (Claude Code: Bash ``echo hi``), the client runs it and sends
the result back (``real_agent_tool_loops``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import real_agents  # noqa: E402
from real_agents.scripted_serve import tool_call_text  # noqa: E402

TASK = ("Create a file named notes.txt that says hello, then tell me what it says.",
        "What files are in this directory?",
        "Add a second line, bye, to notes.txt.",
        "Summarise what we did in one sentence.")
ACCESS = re.compile(r"POST (?P<path>/v1/\S+) (?P<status>\d+|-)(?: session=#\d+)?"
                    r"(?: cached=(?P<reused>[\d,]+)/(?P<prompt>[\d,]+))?"
                    r"(?: prefilled=(?P<prefilled>[\d,]+))?(?: generated=(?P<generated>[\d,]+))?"
                    r"(?: ttft=(?P<ttft>[\d.]+) s)?(?P<joined> joined)?")
READY = re.compile(r"at http://127\.0\.0\.1:(\d+)/v1")


@dataclass
class Request:
    """One request of a step, as the server's access log line says it."""

    path: str
    status: str
    prompt: int = 0
    reused: int = 0
    prefilled: int = 0
    generated: int = 0
    ttft_s: float | None = None
    joined: bool = False

    @classmethod
    def parse(cls, line: str) -> Request | None:
        found = ACCESS.search(line)
        if found is None or "count_tokens" in found["path"]:
            return None
        num = lambda name: int((found[name] or "0").replace(",", ""))  # noqa: E731
        # A request that joined another's computation prefilled nothing itself.
        return cls(found["path"], found["status"], num("prompt"), num("reused"),
                   0 if found["joined"] else num("prefilled"), num("generated"),
                   float(found["ttft"]) if found["ttft"] else None, bool(found["joined"]))


@dataclass
class Step:
    n: int
    ok: bool
    error: str | None
    seconds: float
    requests: list[Request] = field(default_factory=list)
    after_restart: bool = False
    note: str | None = None


class Server:
    """`mlxchat serve` on a free loopback port (or ``argv``: another way to
    start it); its stderr kept line by line."""

    log_to: Path | None = None
    """Where every server's lines are copied as they come (``--server-log``)."""

    def __init__(self, model: str, data: Path, argv: list[str] | None = None):
        env = {**os.environ, "MLXCHAT_HOME": str(data), "HF_HUB_OFFLINE": "1"}
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-m", "mlxchat", "serve", "--model", model,
                     "--port", "0"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines: list[str] = []
        self._port: list[int] = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 900
        while not self._port:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit("the server did not start:\n" + "".join(self.lines[-20:]))
            time.sleep(0.1)
        self.base_url = f"http://127.0.0.1:{self._port[0]}"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if Server.log_to is not None:
                with Server.log_to.open("a") as log:
                    log.write(line)
            if (found := READY.search(line)):
                self._port.append(int(found.group(1)))

    def requests_since(self, mark: int) -> list[Request]:
        return [r for r in map(Request.parse, self.lines[mark:]) if r is not None]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def client_modules(names: list[str] | None) -> list[ModuleType]:
    """Every module under real_agents/ that is a client (has NAME, install, run_step)."""
    found = []
    for info in pkgutil.iter_modules(real_agents.__path__):
        module = importlib.import_module(f"real_agents.{info.name}")
        if all(hasattr(module, a) for a in ("NAME", "install", "run_step")) \
                and (not names or module.NAME in names):
            found.append(module)
    return found


def model_spec(name: str) -> str:
    """A folder the server loads as is (resolved here, in the caller's home)."""
    if Path(name).exists():
        return str(Path(name).resolve())
    from mlxchat.models import resolve_folder
    return str(resolve_folder(name))


def scratch_folders(name: str) -> tuple[Path, Path, Path, Path]:
    """A scratch folder and in it the client's git repository, its HOME and the
    server's data folder (MLXCHAT_HOME)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"mlxchat-{name}-"))
    workdir, home, data = scratch / "project", scratch / "home", scratch / "mlxchat"
    for folder in (workdir, home, data):
        folder.mkdir()
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    return scratch, workdir, home, data


def run_client(client: ModuleType, args: argparse.Namespace, model: str) -> list[Step]:
    binary = client.install(args.prefix)
    scratch, workdir, home, data = scratch_folders(client.NAME)
    os.environ[real_agents.MAX_OUTPUT_VARIABLE] = str(args.max_output)
    # The server's reply length too, for a client that cannot ask for one (Codex);
    # generic: the tools in the system prompt (a model whose template has no place for them).
    (data / "config").mkdir()
    (data / "config" / "config.toml").write_text(
        f"[generation]\nmax_tokens = {args.max_output}\n"
        + (f'tool_prompt = "{args.tool_prompt}"\n' if args.tool_prompt != "template" else ""))
    server = Server(model, data)
    steps: list[Step] = []
    try:
        for n in range(1, args.steps + 1):
            restarted = n == args.restart_before
            if restarted:
                server.stop()
                server = Server(model, data)
            mark, start = len(server.lines), time.monotonic()
            result: dict[str, Any] = client.run_step(
                binary, base_url=server.base_url, model=model, workdir=workdir, home=home,
                prompt=TASK[(n - 1) % len(TASK)], first=n == 1, timeout_s=args.timeout)
            step = Step(n, result["ok"], result["error"], time.monotonic() - start,
                        server.requests_since(mark), restarted, result.get("note"))
            steps.append(step)
            show(client.NAME, step)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return steps


def tool_loop(client: ModuleType, args: argparse.Namespace) -> bool | None:
    """The client runs a tool and sends its result back: against a tiny model
    whose replies are scripted (``real_agents/scripted_serve.py``: the
    client's ``TOOL_CALL``, then "Done."), the step ends without an API error,
    its tool result is stored and the second reply reached it. None when the
    client module names no ``TOOL_CALL``."""
    call = getattr(client, "TOOL_CALL", None)
    if call is None:
        return None
    binary = client.install(args.prefix)
    scratch, workdir, home, data = scratch_folders(f"{client.NAME}-tool")
    os.environ.pop(real_agents.MAX_OUTPUT_VARIABLE, None)  # the scripted call whole
    script = Path(__file__).parent / "real_agents" / "scripted_serve.py"
    server = Server("", data, [sys.executable, str(script), "--reply",
                               tool_call_text(call["name"], call["arguments"]),
                               "--reply", "Done."])
    try:
        model = json.loads(urllib.request.urlopen(server.base_url + "/v1/models",
                                                  timeout=30).read())["data"][0]["id"]
        result = client.run_step(binary, base_url=server.base_url, model=model,
                                 workdir=workdir, home=home, prompt=call["prompt"],
                                 first=True, timeout_s=args.timeout)
        with sqlite3.connect(data / "data" / "sessions.db") as db:
            results = [r for (r,) in db.execute("SELECT content FROM messages "
                                                "WHERE role = 'tool'")]
        requests = server.requests_since(0)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    ran = any(call["expect"] in r for r in results)
    print(f"{client.NAME} tool loop: {'ok' if result['ok'] else result['error']}; "
          f"{len(requests)} requests; tool results stored: {results}", flush=True)
    return bool(result["ok"] and ran and len(requests) >= 2)


def show(name: str, step: Step) -> None:
    said = ("ok" + (f" ({step.note})" if step.note else "")) if step.ok \
        else f"API error: {step.error}"
    print(f"{name} step {step.n}{' (after restart)' if step.after_restart else ''}: "
          f"{len(step.requests)} requests, {step.seconds:.1f} s, {said} "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    for r in step.requests:
        ttft = f"{r.ttft_s:.2f} s" if r.ttft_s is not None else "-"
        print(f"    {r.path} {r.status}: prompt {r.prompt:,}, prefilled {r.prefilled:,}, "
              f"reused {r.reused:,}, generated {r.generated:,}, ttft {ttft}", flush=True)


def prefill_ratio(steps: list[Step]) -> float | None:
    """Tokens prefilled / tokens new, over every request after the first step's:
    a request's new tokens are its prompt less what the one before it left
    in the context (its prompt and its reply)."""
    requests = [r for s in steps for r in s.requests if r.status == "200"]
    first = len([r for r in steps[0].requests if r.status == "200"]) if steps else 0
    prefilled = new = 0
    for before, r in zip(requests[first - 1:], requests[first:]):
        prefilled += r.prefilled
        new += max(0, r.prompt - (before.prompt + before.generated))
    return prefilled / new if new else None


def restart_ratio(steps: list[Step]) -> float | None:
    after = next((i for i, s in enumerate(steps) if s.after_restart), None)
    if not after:
        return None
    before, then = steps[after - 1].requests, steps[after].requests
    if not before or not then or before[0].ttft_s is None or then[0].ttft_s is None:
        return None
    return then[0].ttft_s / max(before[0].ttft_s, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--clients", help="comma-separated NAMEs (default: every module)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--restart-before", type=int, default=3)
    parser.add_argument("--prefix", type=Path,
                        default=Path(tempfile.gettempdir()) / "mlxchat-agents")
    parser.add_argument("--max-output", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--tool-prompt", choices=("template", "generic"), default="template",
                        help="the server's tool_prompt setting (generic: the tools reach a "
                        "model whose template shows none)")
    parser.add_argument("--server-log", type=Path, help="copy the servers' lines to this file")
    parser.add_argument("--no-tool-loop", dest="tool_loop", action="store_false",
                        help="skip the scripted tool call through each client")
    args = parser.parse_args()
    # SIGTERM ends it as ctrl-c does: each server and scratch folder is cleaned up.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    Server.log_to = args.server_log
    clients = client_modules(args.clients.split(",") if args.clients else None)
    if not clients:
        raise SystemExit("no client module found under bench/real_agents/")
    model = model_spec(args.model)
    figures = {}
    for client in clients:
        try:
            figures[client.NAME] = run_client(client, args, model)
        except RuntimeError as exc:  # not installable here
            print(f"{client.NAME}: {exc}", flush=True)
            figures[client.NAME] = []
    tools = {client.NAME: tool_loop(client, args) for client in clients} \
        if args.tool_loop else {}
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    ok = sum(1 for steps in figures.values() if steps and all(s.ok for s in steps))
    print(f"\nreal_agents_ok: {ok} of {len(figures)} (load {load})")
    proven = [name for name, ran in tools.items() if ran]
    if tools:
        print(f"real_agent_tool_loops: {len(proven)} of "
              f"{sum(1 for ran in tools.values() if ran is not None)} ({', '.join(proven)})")
    for name, steps in figures.items():
        ratio, restart = prefill_ratio(steps), restart_ratio(steps)
        print(f"{name}: real_agent_prefill_ratio "
              f"{'-' if ratio is None else f'{ratio:.3f}'} (goal <= 1.1), "
              f"real_agent_restart_ratio {'-' if restart is None else f'{restart:.2f}'} "
              f"(goal <= 1.5)")


if __name__ == "__main__":
    main()
