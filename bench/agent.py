"""The agent benchmark: a replayed coding-agent session, built here from the
repository's own files (no download), through the ``anthropic`` SDK against
`mlxchat serve` and the same messages in OpenAI's form against
`mlx_lm.server` (its defaults), one after the other in one run, each a real
process on a free loopback port, stopped after.

    PYTHONPATH=app .venv/bin/python bench/agent.py [--quick] [--model smollm2-135m|FOLDER]

The session: a system prompt with the tools' definitions (~4k tokens), a
task, then 20 steps, each an assistant ``tool_use`` (a line of text and the
call) and its ``tool_result``: 200-1,500 tokens of a file of this repository.
From step 8 three sub-agents (each its own system prompt and task) take a
step after each main step; both servers are restarted before step 14. Each
request asks for one token: its time is the time to first token.

Prints each request's TTFT on both servers and what ours prefilled, then:
``agent_total_ttft_ratio`` (sum of TTFTs, ours / mlx_lm.server's; goal
<= 0.3), ``agent_restart_step_ratio`` (our TTFT of the main agent's first
step after the restart / its step before; goal <= 1.5), ``agent_prefilled_ratio``
(tokens we prefilled over every request / tokens that were new in them;
goal <= 1.05), with the load average. ``--quick``: 10 steps, sub-agents from
step 4, the restart before step 7, shorter prompt and results.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from anthropic import Anthropic  # noqa: E402
from serve import Server, model_folder  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REQUEST_TIMEOUT_S = 7200
"""One request may take this long (mlx_lm.server re-prefilling on a busy CPU)."""
TOOL_NAMES = ("Read", "Write", "Edit", "Bash", "Grep", "Glob", "ListDir", "RunTests",
              "GitLog", "GitDiff", "WebNote", "Task")


@dataclass(frozen=True)
class Shape:
    """How big the replayed session is."""

    steps: int = 20
    sub_from: int = 8
    restart_at: int = 14
    sub_steps: int = 4
    system_tokens: int = 4000
    result_tokens: tuple[int, int] = (200, 1500)


QUICK = Shape(steps=10, sub_from=4, restart_at=7, sub_steps=2, system_tokens=1500,
              result_tokens=(100, 400))


class Tokens:
    """The model's tokenizer, to cut texts to a number of tokens."""

    def __init__(self, folder: Path):
        from tokenizers import Tokenizer
        self.hf = Tokenizer.from_file(str(folder / "tokenizer.json"))

    def cut(self, text: str, tokens: int) -> str:
        enc = self.hf.encode(text, add_special_tokens=False)
        if len(enc.ids) <= tokens:
            return text
        return text[:enc.offsets[tokens - 1][1]]

    def count(self, text: str) -> int:
        return len(self.hf.encode(text, add_special_tokens=False).ids)


def tools() -> list[dict[str, Any]]:
    """The agent's tools as Anthropic's clients define them (descriptions from
    the repository's docs, so they read like real ones)."""
    docs = sorted((REPO / "docs").glob("*.md"))
    out = []
    for i, name in enumerate(TOOL_NAMES):
        text = docs[i % len(docs)].read_text(encoding="utf-8") if docs else name
        out.append({"name": name, "description": " ".join(text.split())[:1200],
                    "input_schema": {"type": "object", "required": ["path"], "properties": {
                        "path": {"type": "string", "description": "A path in the repository."},
                        "pattern": {"type": "string", "description": "What to look for."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 2000}}}})
    return out


def system_prompt(tok: Tokens, tokens: int, role: str, defined: list[dict]) -> str:
    """A coding agent's system prompt: its role, the project's design notes,
    and its tools (templates that render no tools see them here)."""
    listed = json.dumps([{"name": t["name"], "description": t["description"][:400]}
                         for t in defined], indent=1)
    notes = (REPO / "README.md").read_text(encoding="utf-8")
    head = f"You are {role}, working in the mlxchat repository.\n\nTools:\n{listed}\n\n"
    return tok.cut(head + notes, tokens)


def files() -> list[Path]:
    return sorted(p for p in (REPO / "app" / "mlxchat").rglob("*.py")
                  if p.stat().st_size > 6000)


@dataclass
class Conversation:
    """One agent's messages, grown a step at a time."""

    name: str
    system: str
    messages: list[dict] = field(default_factory=list)
    last_total: int = 0
    """Prompt tokens of its previous request (ours, from the usage)."""

    def step(self, n: int, path: Path, result: str) -> None:
        call_id = f"toolu_{self.name}_{n:02d}"
        rel = str(path.relative_to(REPO))
        self.messages += [
            {"role": "assistant", "content": [
                {"type": "text", "text": f"I'll read {rel}."},
                {"type": "tool_use", "id": call_id, "name": "Read", "input": {"path": rel}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": result}]}]


def conversation_tokens(tok: Tokens, conv: Conversation) -> int:
    """About the tokens ``conv`` renders to (its texts, without the template)."""
    texts = [conv.system]
    for m in conv.messages:
        blocks = [{"text": m["content"]}] if isinstance(m["content"], str) else m["content"]
        texts += [b.get("text") or b.get("content") or json.dumps(b.get("input", ""))
                  for b in blocks]
    return sum(tok.count(t) for t in texts) + 8 * len(conv.messages)


def openai_form(conv: Conversation) -> list[dict]:
    """The same conversation as an OpenAI client sends it."""
    out: list[dict] = [{"role": "system", "content": conv.system}]
    for m in conv.messages:
        if isinstance(m["content"], str):
            out.append({"role": m["role"], "content": m["content"]})
            continue
        if m["role"] == "assistant":
            text = "".join(b["text"] for b in m["content"] if b["type"] == "text")
            calls = [{"id": b["id"], "type": "function", "function": {
                "name": b["name"], "arguments": json.dumps(b["input"])}}
                for b in m["content"] if b["type"] == "tool_use"]
            out.append({"role": "assistant", "content": text, "tool_calls": calls})
            continue
        for b in m["content"]:
            out.append({"role": "tool", "tool_call_id": b["tool_use_id"],
                        "content": b["content"]})
    return out


def schedule(shape: Shape) -> list[tuple[str, int]]:
    """(conversation, its step number) in the order the requests go: the main
    agent's steps, each followed from ``sub_from`` by one sub-agent's."""
    order: list[tuple[str, int]] = [("main", 0)]
    taken = {"sub1": 0, "sub2": 0, "sub3": 0}
    subs = list(taken)
    turn = 0
    for n in range(1, shape.steps + 1):
        order.append(("main", n))
        if n < shape.sub_from:
            continue
        for _ in range(len(subs)):
            name = subs[turn % len(subs)]
            turn += 1
            if taken[name] <= shape.sub_steps:
                order.append((name, taken[name]))
                taken[name] += 1
                break
    return order


def build(tok: Tokens, shape: Shape) -> tuple[list[dict], list[tuple[Conversation, str]]]:
    """The tools and, request by request, the conversation as sent (a copy) and
    its label."""
    defined = tools()
    sources = files()
    lo, hi = shape.result_tokens
    convs = {"main": Conversation("main", system_prompt(tok, shape.system_tokens,
                                                        "the main coding agent", defined))}
    for i in (1, 2, 3):
        convs[f"sub{i}"] = Conversation(f"sub{i}", system_prompt(
            tok, shape.system_tokens // 4, f"sub-agent {i}, who reviews one module", defined))
    requests = []
    used = 0
    for name, n in schedule(shape):
        conv = convs[name]
        if n == 0:
            conv.messages.append({"role": "user", "content": f"{name}: find where the KV "
                                  "cache is saved and restored, and explain it."})
        else:
            path = sources[(used * 7) % len(sources)]
            size = lo + (used * 389) % (hi - lo + 1)
            used += 1
            conv.step(n, path, tok.cut(path.read_text(encoding="utf-8"), size))
        snapshot = Conversation(conv.name, conv.system, [dict(m) for m in conv.messages])
        requests.append((snapshot, f"{name}#{n}"))
    return defined, requests


@dataclass
class Figures:
    """What one server did for each request."""

    ttft: list[float] = field(default_factory=list)
    prefilled: list[int] = field(default_factory=list)
    new: list[int] = field(default_factory=list)


def run_ours(argv: list[str], env: dict[str, str], model: str, defined: list[dict],
             requests: list[tuple[Conversation, str]], restart: str) -> Figures:
    out = Figures()
    totals: dict[str, int] = {}
    server = Server(argv, env)
    try:
        for conv, label in requests:
            if label == restart:
                server.stop()
                server = Server(argv, env)
            api = Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key="x",
                            max_retries=0, timeout=REQUEST_TIMEOUT_S)
            t0 = time.perf_counter()
            reply = api.messages.create(model=model, max_tokens=1, system=conv.system,
                                        messages=conv.messages, tools=defined,
                                        extra_body={"temperature": 0})
            out.ttft.append(time.perf_counter() - t0)
            usage = reply.usage
            total = usage.input_tokens + (usage.cache_read_input_tokens or 0)
            out.prefilled.append(usage.input_tokens)
            out.new.append(total - totals.get(conv.name, 0))
            totals[conv.name] = total
            print(f"  mlxchat serve {label}: {out.ttft[-1] * 1000:.0f} ms, prefilled "
                  f"{usage.input_tokens} of {out.new[-1]} new", file=sys.stderr, flush=True)
    finally:
        server.stop()
    return out


def run_theirs(argv: list[str], env: dict[str, str], model: str, defined: list[dict],
               requests: list[tuple[Conversation, str]], restart: str) -> Figures:
    out = Figures()
    functions = [{"type": "function", "function": {
        "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}}
        for t in defined]
    server = Server(argv, env)
    try:
        for conv, label in requests:
            if label == restart:
                server.stop()
                server = Server(argv, env)
            # Its re-prefill after the restart takes many minutes on a CPU.
            client = server.client.with_options(timeout=REQUEST_TIMEOUT_S)
            t0 = time.perf_counter()
            client.chat.completions.create(model=model, messages=openai_form(conv),
                                                  tools=functions, max_tokens=1,
                                                  temperature=0)
            out.ttft.append(time.perf_counter() - t0)
            print(f"  mlx_lm.server {label}: {out.ttft[-1] * 1000:.0f} ms", file=sys.stderr,
                  flush=True)
    finally:
        server.stop()
    return out


def report(requests: list[tuple[Conversation, str]], ours: Figures, theirs: Figures,
           restart: str, before: str) -> None:
    print(f"{'request':10} {'ours ms':>9} {'prefilled':>9} {'new':>6} {'mlx_lm ms':>10}")
    labels = [label for _, label in requests]
    for i, label in enumerate(labels):
        print(f"{label:10} {ours.ttft[i] * 1000:9.0f} {ours.prefilled[i]:9d} {ours.new[i]:6d} "
              f"{theirs.ttft[i] * 1000:10.0f}")
    after, prior = labels.index(restart), labels.index(before)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"sum of TTFTs: ours {sum(ours.ttft):.1f} s, mlx_lm.server {sum(theirs.ttft):.1f} s; "
          f"mlx_lm.server's restart step / the one before: "
          f"{theirs.ttft[after] / theirs.ttft[prior]:.2f}; load average {load}")
    print(f"ratios: agent_total_ttft_ratio={sum(ours.ttft) / sum(theirs.ttft):.3f} "
          f"agent_restart_step_ratio={ours.ttft[after] / ours.ttft[prior]:.3f} "
          f"agent_prefilled_ratio={sum(ours.prefilled) / max(sum(ours.new), 1):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m",
                        help="an alias or an MLX model folder both servers load")
    parser.add_argument("--quick", action="store_true",
                        help="10 steps, sub-agents from step 4, restart before step 7")
    args = parser.parse_args()
    shape = QUICK if args.quick else Shape()
    folder = model_folder(args.model)
    tok = Tokens(folder)
    defined, requests = build(tok, shape)
    window = json.loads((folder / "config.json").read_text()).get("max_position_embeddings")
    longest = max(conversation_tokens(tok, conv) for conv, _ in requests)
    if window and longest > 0.9 * window:  # the results cut to fit the model's window
        room = (0.9 * window - shape.system_tokens) / (longest - shape.system_tokens)
        lo, hi = shape.result_tokens
        shape = replace(shape, result_tokens=(max(20, int(lo * room)), max(40, int(hi * room))))
        print(f"the session needs ~{longest:,} tokens, the model's window is {window:,}: "
              f"tool results cut to {shape.result_tokens[0]}-{shape.result_tokens[1]} tokens")
        defined, requests = build(tok, shape)
    restart = f"main#{shape.restart_at}"
    before = f"main#{shape.restart_at - 1}"  # the main agent's step before the restart
    home = tempfile.mkdtemp(prefix="mlxchat-bench-agent-")
    env = {**os.environ, "MLXCHAT_HOME": home, "HF_HUB_OFFLINE": "1"}
    print(f"model: {folder}; {len(requests)} requests; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ours = run_ours([sys.executable, "-m", "mlxchat", "serve", "--model", str(folder)], env,
                    str(folder), defined, requests, restart)
    theirs = run_theirs([sys.executable, "-m", "mlx_lm.server", "--model", str(folder)], env,
                        str(folder), defined, requests, restart)
    report(requests, ours, theirs, restart, before)


if __name__ == "__main__":
    main()
