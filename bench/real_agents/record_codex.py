"""Record what the real Codex CLI sends: two headless steps (a prompt whose
first reply is a scripted ``exec_command`` call, ``echo hello-from-tool``, so
the client runs it and sends the result back before the reply that ends the
turn; then ``codex exec resume --last``) against a capture server on
127.0.0.1 that logs each ``POST /v1/responses`` and answers a minimal valid
stream (a reasoning item with an ``encrypted_content`` of its own, then the
call or a message); the bodies are written with this machine's paths, user
and ids replaced, as the suite's test data.

    python bench/real_agents/record_codex.py OUT_DIR [--prefix NPM_PREFIX]
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
from real_agents import codex_cli  # noqa: E402

MODEL = "local-model"
STEPS = (("Run echo to say hello, then stop.", True, ("codex-first", "codex-tool-result")),
         ("Now say bye.", False, ("codex-resume",)))
ARGUMENTS = json.dumps({"cmd": "echo hello-from-tool"})
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _sse(seq: itertools.count, name: str, body: dict[str, Any]) -> bytes:
    data = {"type": name, "sequence_number": next(seq), **body}
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _answered(body: dict[str, Any]) -> bool:
    return any(i.get("type") == "function_call_output" for i in body.get("input", []))


def reply_events(n: int, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A reasoning item, then an exec_command call (no output sent back yet)
    or a message; then ``response.completed``."""
    response = {"id": f"resp_{n}", "object": "response", "created_at": 0,
                "status": "in_progress", "model": body.get("model", MODEL), "output": []}
    thought = {"type": "reasoning", "id": f"rs_{n}", "encrypted_content": f"ENC-{n}",
               "summary": [{"type": "summary_text", "text": "thinking"}]}
    if _answered(body):
        item = {"type": "message", "id": f"msg_{n}", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "All done.", "annotations": []}]}
    else:
        item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                "name": "exec_command", "arguments": ARGUMENTS, "status": "completed"}
    usage = {"input_tokens": 1, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 2}
    return [("response.created", {"response": response}),
            ("response.output_item.added", {"output_index": 0, "item": {**thought,
                                                                        "summary": []}}),
            ("response.output_item.done", {"output_index": 0, "item": thought}),
            ("response.output_item.added", {"output_index": 1, "item": item}),
            ("response.output_item.done", {"output_index": 1, "item": item}),
            ("response.completed", {"response": {**response, "status": "completed",
                                                 "output": [thought, item], "usage": usage}})]


class Capture(BaseHTTPRequestHandler):
    """Logs each request into ``server.seen`` and answers ``reply_events``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.loads(raw) if raw else {}
        n = next(self.server.count)  # type: ignore[attr-defined]
        self.server.seen.append({"path": self.path, "headers": dict(self.headers),  # type: ignore[attr-defined]
                                 "body": body})
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        seq = itertools.count()
        for name, event in reply_events(n, body):
            self.wfile.write(_sse(seq, name, event))
        self.close_connection = True


def scrub(text: str, *, workdir: Path, home: Path, port: int) -> str:
    """This machine's paths, user, ids, times and address replaced by fixed ones."""
    for real, shown in ((str(workdir), "/home/user/project"),
                        (str(home / ".codex"), "/home/user/.codex"), (str(home), "/home/user"),
                        (f"127.0.0.1:{port}", "127.0.0.1:PORT")):
        text = text.replace(real, shown)
    text = text.replace(f"/home/{getpass.getuser()}/", "/home/user/")
    text = re.sub(r'(\\"turn_started_at_unix_ms\\":)\d+', r"\g<1>1796670000000", text)
    text = re.sub(r"Chunk ID: [0-9a-f]+", "Chunk ID: 000000", text)
    ids: dict[str, str] = {}
    return UUID.sub(lambda m: ids.setdefault(
        m.group(0), f"00000000-0000-7000-8000-{len(ids) + 1:012d}"), text)


def record(out: Path, prefix: Path) -> list[Path]:
    binary = codex_cli.install(prefix)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    server.seen, server.count = [], itertools.count(1)  # type: ignore[attr-defined]
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
        for prompt, first, names in STEPS:
            server.seen.clear()  # type: ignore[attr-defined]
            step = codex_cli.run_step(binary, base_url=f"http://127.0.0.1:{port}",
                                      model=MODEL, workdir=workdir, home=home,
                                      prompt=prompt, first=first, timeout_s=300)
            seen = server.seen  # type: ignore[attr-defined]
            if not step["ok"] or len(seen) != len(names):
                raise SystemExit(f"{prompt!r}: {step['error']} ({len(seen)} requests)")
            for name, request in zip(names, seen):
                request["headers"] = {k.lower(): v for k, v in request["headers"].items()
                                      if k.lower() != "content-length"}
                path = out / f"{name}.json"
                path.write_text(scrub(json.dumps(request, indent=1, ensure_ascii=False),
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
