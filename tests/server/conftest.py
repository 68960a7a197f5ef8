"""The real server on the tiny model: a conversation opened through the
composition root on a store in the test's folder, served on a free
127.0.0.1 port in a thread, stopped (bounded) at the end."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from mlxchat.config import Settings
from mlxchat.generation import GenerationSettings
from mlxchat.server.app import build_app
from mlxchat.server.core.service import ChatService
from mlxchat.server.runner import RunningServer
from mlxchat.session.conversation import Conversation
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store


def tiny_settings(max_tokens: int = 8, context_window: int | None = None) -> Settings:
    return Settings(model="tiny", memory_budget_bytes=16 * 10**9,
                    generation=GenerationSettings(temperature=0.0, max_tokens=max_tokens,
                                                  context_window=context_window))


def open_tiny(tiny, db: Path, max_tokens: int = 8, context_window: int | None = None, *,
              keep_snapshots: bool = True) -> Conversation:
    return open_conversation(tiny_settings(max_tokens, context_window),
                             store_factory=lambda: open_store(db), keep_snapshots=keep_snapshots,
                             load_model=lambda spec, progress=None: tiny).conversation


@dataclass
class Served:
    conv: Conversation
    service: ChatService
    server: RunningServer

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop(timeout_s=10)
        self.service.close()
        self.conv.shutdown()


def serve(tiny, db: Path, *, api_key: str | None = None, max_waiting: int = 8,
          max_body_bytes: int = 1 << 20, max_tokens: int = 8,
          kv_budget_bytes: int | None = None, context_window: int | None = None,
          idle_join_s: float = 3600.0, keep_snapshots: bool = True, parallel: int = 1,
          memory_bytes: int | None = None, cors: tuple[str, ...] = (),
          ping_s: float | None = None, rejoin_s: float | None = None,
          **server_options) -> Served:
    """``server_options``: RunningServer's (max_connections, header_timeout_s);
    ``idle_join_s`` far off unless a test is about the idle join."""
    conv = open_tiny(tiny, db, max_tokens, context_window, keep_snapshots=keep_snapshots)
    service = ChatService(conv, store=conv.store, engine=conv.engine, max_waiting=max_waiting,
                          kv_budget_bytes=kv_budget_bytes, idle_join_s=idle_join_s,
                          parallel=parallel, memory_bytes=memory_bytes,
                          **({} if rejoin_s is None else {"rejoin_s": rejoin_s}))
    app = build_app(service, api_key=api_key, max_body_bytes=max_body_bytes, cors=cors,
                    **({} if ping_s is None else {"ping_s": ping_s}))
    server = RunningServer(app, host="127.0.0.1", port=0, **server_options).start()
    return Served(conv, service, server)


@pytest.fixture
def served(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db")
    yield running
    running.stop()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)

    def lines(self) -> list[str]:
        return [line for line in self.body.decode().splitlines() if line]


def request(url: str, method: str, path: str, body: object = None, *,
         headers: dict[str, str] | None = None, timeout_s: float = 60) -> Reply:
    """One raw HTTP request (bytes or JSON), read to its end."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    try:
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return Reply(response.status, dict(response.getheaders()), response.read())
    finally:
        conn.close()


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
"""A tool definition as clients send it."""


def real_qwen3(folder):
    """A tiny random Qwen3 speaking through Qwen3's real published template."""
    from pathlib import Path

    from mlxchat.models import load_folder

    from tests.families.builders import with_template, write_family_model

    real = Path(__file__).parents[1] / "families" / "real_templates" / "qwen3.jinja"
    family = with_template("qwen3", real.read_text())
    return load_folder(write_family_model(family, folder), name="tiny", spec="tiny")
