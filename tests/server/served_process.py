"""A real `mlxchat serve` process on 127.0.0.1 (any free port), its address
read from the line it prints when it listens; every wait is bounded and the
process is ended by its pid when a test is done with it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

READY = re.compile(r"at http://127\.0\.0\.1:(\d+)/v1")
START_TIMEOUT_S = 120  # imports and the model on a busy 2-core machine


class ServeProcess:
    def __init__(self, model: Path, *args: str, env: dict[str, str] | None = None):
        self.model = model
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlxchat", "serve", "--model", str(model), "--port", "0",
             *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=env or os.environ.copy())
        self.log: list[str] = []
        self._port: list[int] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            self.log.append(line)
            found = READY.search(line)
            if found:
                self._port.append(int(found.group(1)))

    def wait_ready(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._port:
            assert self.proc.poll() is None, "".join(self.log)[-3000:]
            assert time.monotonic() < deadline, "not listening: " + "".join(self.log)[-3000:]
            time.sleep(0.05)
        return self._port[0]

    @property
    def port(self) -> int:
        return self.wait_ready()

    def end(self, sig: int = signal.SIGKILL, timeout_s: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self._reader.join(timeout=5)


class Stream:
    """A streamed chat completion read off a raw socket, event by event."""

    def __init__(self, port: int, model: str, text: str, *, max_tokens: int,
                 headers: dict[str, str] | None = None):
        body = json.dumps({"model": model, "stream": True, "max_tokens": max_tokens,
                           "temperature": 0.8, "seed": 3,
                           "messages": [{"role": "user", "content": text}]})
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{extra}"
                           f"Content-Type: application/json\r\nContent-Length: {len(body)}"
                           "\r\n\r\n" + body).encode())
        self.raw = b""
        self.events: list[str] = []
        self.text = ""
        self.closed = False

    def read(self, until, timeout_s: float = 120) -> None:
        """Read until ``until(self)`` holds or the server closes the connection."""
        deadline = time.monotonic() + timeout_s
        while not until(self) and not self.closed:
            assert time.monotonic() < deadline, self.raw[-2000:]
            data = self.sock.recv(65536)
            if not data:
                self.closed = True
                break
            self.raw += data
            self._parse()

    def _parse(self) -> None:
        head, sep, rest = self.raw.partition(b"\r\n\r\n")
        if not sep:
            return
        events = re.findall(rb"data: (.*?)\n\n", rest)
        for data in events[len(self.events):]:
            event = data.decode()
            self.events.append(event)
            if event.startswith("{"):
                body = json.loads(event)
                for choice in body.get("choices", []):
                    self.text += choice.get("delta", {}).get("content") or ""

    def close(self) -> None:
        self.sock.close()


def end_all(processes: list[ServeProcess]) -> None:
    for served in processes:
        if served.proc.poll() is None:
            os.kill(served.proc.pid, signal.SIGKILL)
            served.proc.wait(timeout=10)
