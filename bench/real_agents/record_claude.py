"""Record what the real Claude Code sends: three headless steps (a plain
prompt; a prompt whose reply is a scripted Bash ``echo hi`` call, so the
client runs it and sends the result back; a ``--continue`` step) against a
capture server on 127.0.0.1 that logs each request and answers a minimal
valid Anthropic reply; the bodies are written with this machine's paths,
user and ids replaced, as the suite's test data.

    python bench/real_agents/record_claude.py OUT_DIR [--prefix NPM_PREFIX]
"""

from __future__ import annotations

import argparse
import getpass
import itertools
import json
import re
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from real_agents import claude_code  # noqa: E402

MODEL = "local-model"
STEPS = (("hello", "Say hello", True), ("tool", "Run echo hi", False),
         ("continue", "Now say bye", False))
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
DEVICE = re.compile(r'(\\?"device_id\\?":\\?")[0-9a-f]{64}')


def _sse(name: str, body: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **body})}\n\n".encode()


def _has_result(body: dict[str, Any]) -> bool:
    return any(isinstance(b, dict) and b.get("type") == "tool_result"
               for m in body.get("messages", []) if isinstance(m.get("content"), list)
               for b in m["content"])


class Capture(BaseHTTPRequestHandler):
    """Logs each request into ``server.seen``; answers "ok", or a Bash call
    when ``server.tool`` is set and the request has no tool result yet."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.loads(raw) if raw else {}
        n = next(self.server.count)  # type: ignore[attr-defined]
        self.server.seen.append({"path": self.path, "headers": dict(self.headers),  # type: ignore[attr-defined]
                                 "body": body})
        if "count_tokens" in self.path:
            return self._json({"input_tokens": 1})
        call = self.server.tool and "Bash" in [t.get("name") for t in body.get("tools", [])] \
            and not _has_result(body)  # type: ignore[attr-defined]
        block = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash",
                 "input": {"command": "echo hi", "description": "Say hi"}} if call \
            else {"type": "text", "text": "ok"}
        message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant",
                   "model": body.get("model", MODEL), "content": [block],
                   "stop_reason": "tool_use" if call else "end_turn", "stop_sequence": None,
                   "usage": {"input_tokens": 1, "output_tokens": 1}}
        if not body.get("stream"):
            return self._json(message)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        start = {**message, "content": [], "stop_reason": None}
        empty = {**block, "input": {}} if call else {"type": "text", "text": ""}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])} \
            if call else {"type": "text_delta", "text": "ok"}
        for name, event in (("message_start", {"message": start}),
                            ("content_block_start", {"index": 0, "content_block": empty}),
                            ("content_block_delta", {"index": 0, "delta": delta}),
                            ("content_block_stop", {"index": 0}),
                            ("message_delta", {"delta": {"stop_reason": message["stop_reason"],
                                                         "stop_sequence": None},
                                               "usage": {"output_tokens": 1}}),
                            ("message_stop", {})):
            self.wfile.write(_sse(name, event))
        self.close_connection = True

    def _json(self, body: dict[str, Any]) -> None:
        out = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def scrub(text: str, *, workdir: Path, home: Path, port: int) -> str:
    """This machine's paths, user, ids and address replaced by fixed ones."""
    for real, shown in ((str(workdir), "/home/user/project"), (str(home), "/home/user"),
                        (re.sub(r"[^A-Za-z0-9]", "-", str(workdir)), "-home-user-project"),
                        (f"127.0.0.1:{port}", "127.0.0.1:8080")):
        text = text.replace(real, shown)
    user = getpass.getuser()
    text = text.replace(f"/home/{user}/", "/home/user/")
    text = re.sub(r"OS Version: [^\\\n\"]*", "OS Version: Linux 6.8.0", text)
    text = DEVICE.sub(lambda m: m.group(1) + "0" * 64, text)
    ids: dict[str, str] = {}
    return UUID.sub(lambda m: ids.setdefault(
        m.group(0), f"00000000-0000-4000-8000-{len(ids) + 1:012d}"), text)


def record(out: Path, prefix: Path) -> list[Path]:
    binary = claude_code.install(prefix)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    server.seen, server.count, server.tool = [], itertools.count(), False  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    scratch = Path(tempfile.mkdtemp(prefix="mlxchat-record-"))
    workdir, home = scratch / "project", scratch / "home"
    workdir.mkdir()
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    written = []
    out.mkdir(parents=True, exist_ok=True)
    try:
        for name, prompt, first in STEPS:
            server.tool = name == "tool"  # type: ignore[attr-defined]
            server.seen.clear()  # type: ignore[attr-defined]
            step = claude_code.run_step(binary, base_url=f"http://127.0.0.1:{port}",
                                        model=MODEL, workdir=workdir, home=home,
                                        prompt=prompt, first=first, timeout_s=300)
            if not step["ok"]:
                raise SystemExit(f"step {name}: {step['error']}")
            for i, seen in enumerate(server.seen):  # type: ignore[attr-defined]
                seen["headers"].pop("Content-Length", None)
                path = out / f"claude_code_{name}_{i + 1}.json"
                path.write_text(scrub(json.dumps(seen, indent=1, ensure_ascii=False),
                                      workdir=workdir, home=home, port=port) + "\n")
                written.append(path)
    finally:
        server.shutdown()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--prefix", type=Path,
                        default=Path(tempfile.gettempdir()) / "mlxchat-agents")
    args = parser.parse_args()
    for path in record(args.out, args.prefix):
        print(path)


if __name__ == "__main__":
    main()
