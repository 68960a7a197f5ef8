"""Real MCP servers for the tests (``mcp_server.py``, the SDK's MCPServer) and
what the tests ask of the OS about processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from mlxchat.tools.config import ToolsConfig, server_from
from mlxchat.tools.host import ToolHost

SERVER = Path(__file__).with_name("mcp_server.py")


def qwen_call(tool: str, **arguments) -> str:
    """A reply as Qwen3 writes a call (what a forced reply says)."""
    import json

    return "<tool_call>\n" + json.dumps({"name": tool, "arguments": arguments}) \
        + "\n</tool_call>"


def entry(markers: Path, **more) -> dict:
    """The test server's entry as a user writes it in mcp.json."""
    return {"command": sys.executable, "args": [str(SERVER), str(markers)], **more}


def config_of(entries: dict[str, dict], path: Path = Path("mcp.json")) -> ToolsConfig:
    config = ToolsConfig(path)
    for name, e in entries.items():
        config.servers[name] = server_from(name, e, os.environ)
    return config


def host_for(markers: Path, logs: Path, **entries: dict) -> ToolHost:
    """A host with the test server as 't' (and ``entries``), started and ready."""
    host = ToolHost(config_of({"t": entry(markers), **entries}), log_dir=logs)
    host.start(["t"])
    host.wait(["t"], timeout_s=60)
    assert any(s.name == "t" and s.state == "ready" for s in host.statuses()), host.statuses()
    return host


def ran(markers: Path, tool: str) -> list[str]:
    """What the server's ``tool`` was called with, one line a call (none: never ran)."""
    path = markers / f"{tool}.ran"
    return path.read_text().splitlines() if path.exists() else []


def children(pid: int) -> list[int]:
    """The live child processes of ``pid``, as the OS lists them."""
    assert shutil.which("pgrep"), "the tests ask pgrep for child processes"
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if alive(int(p))]


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    out = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                         text=True).stdout.strip()
    return bool(out) and not out.startswith("Z")


def wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """Those of ``pids`` still running after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@contextmanager
def http_server(markers: Path):
    """The test server over streamable HTTP on 127.0.0.1 (a free port) in a
    thread of this process; stopped, bounded, at the end. Yields its URL."""
    import importlib.util

    import uvicorn

    spec = importlib.util.spec_from_file_location("mlxchat_test_mcp_server", SERVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app = module.build(markers).streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the HTTP MCP server did not start"
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        assert not thread.is_alive(), "the HTTP MCP server did not stop"
