"""The API on a tiny vision-language model, as every family's API test uses it:
a server on 127.0.0.1 (stopped when the ``serving`` block ends), an OpenAI
request with an image part, and the follow-up that must take the whole first
exchange, the image's span with it, from the cache."""

from __future__ import annotations

import base64
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from mlxchat.server.app import build_app
from mlxchat.server.core.image_fetch import FetchLimits
from mlxchat.server.core.service import ChatService
from mlxchat.server.runner import RunningServer

from tests.server.conftest import Served, open_tiny, request


def serve(loaded, db: Path, *, allow_image_urls: bool = False, **fetch) -> Served:
    """``fetch``: FetchLimits' fields."""
    conv = open_tiny(loaded, db)
    service = ChatService(conv, store=conv.store, engine=conv.engine, max_waiting=4,
                          kv_budget_bytes=None)
    app = build_app(service, max_body_bytes=4 << 20, allow_image_urls=allow_image_urls,
                    image_fetch=FetchLimits(private=True, **fetch))
    return Served(conv, service, RunningServer(app, host="127.0.0.1", port=0).start())


@contextmanager
def serving(loaded, db: Path, **options) -> Iterator[Served]:
    """``serve``'s server for the block, stopped after it however it ends."""
    served = serve(loaded, db, **options)
    try:
        yield served
    finally:
        served.stop()


def data_url(raw: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(raw).decode()


def openai(messages) -> dict:
    return {"model": "tiny", "messages": messages, "temperature": 0, "max_tokens": 6}


@dataclass
class Asked:
    """The first request: its user message (the image and a question), the reply, its usage."""

    user: dict
    reply: str
    usage: dict


def ask_about_image(served: Served, shot: bytes) -> Asked:
    user = {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(shot)}},
        {"type": "text", "text": "What is in it?"}]}
    got = request(served.url, "POST", "/v1/chat/completions", openai([user]))
    assert got.status == 200, got.body
    return Asked(user, got.json()["choices"][0]["message"]["content"], got.json()["usage"])


def follow_up_reuses_it(served: Served, asked: Asked) -> dict:
    """The next request (the first exchange, then a question): the whole first
    exchange, the image's span with it, comes from the cache, counted in
    ``cached_tokens``; only the new message is prefilled. Returns its usage."""
    got = request(served.url, "POST", "/v1/chat/completions", openai([
        asked.user, {"role": "assistant", "content": asked.reply},
        {"role": "user", "content": "And the colours?"}]))
    assert got.status == 200, got.body
    usage = got.json()["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert cached == served.conv.turns.last_stats.reused_tokens > asked.usage["prompt_tokens"]
    assert usage["prompt_tokens"] - cached == len(served.conv.messages[-2].token_ids)
    return usage
