"""One line per request in the server's log: method, path, status, the session
it ran on, its reused / prompt tokens, prefilled and generated tokens, time to
first token, and its time. The figures of a turn are
noted by the service (``note_turn``) into the request's own slot, a context
variable this middleware sets for the request."""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlxchat.turn_stats import TurnStats

log = logging.getLogger("mlxchat.server.access")

_TURN: ContextVar[dict[str, Any] | None] = ContextVar("mlxchat_request_turn", default=None)


def note_turn(session_id: int | None, stats: TurnStats, *, joined: bool = False) -> None:
    """The request being answered ran a turn: on ``session_id``, with ``stats``
    (``joined``: it was another request's, which this one joined)."""
    slot = _TURN.get()
    if slot is not None:
        slot.update(session=session_id, cached=stats.reused_tokens, prompt=stats.prompt_tokens,
                    prefilled=stats.prefilled_tokens, generated=stats.generated_tokens,
                    ttft=stats.ttft_s, joined=joined)


def note_first_token(at: float | None) -> None:
    """The request's reply had its first token at ``at`` (``time.monotonic()``):
    its ttft is then counted from the request's arrival (its wait in the
    queue, the fit check, its session found and its KV read from disk count),
    not from its turn's start in the engine."""
    slot = _TURN.get()
    if slot is not None and at is not None:
        slot["first_token_at"] = at


def line(method: str, path: str, status: int, seconds: float, turn: dict[str, Any]) -> str:
    """'POST /v1/chat/completions 200 session=#12 cached=1,180/1,206 prefilled=26
    generated=40 ttft=0.31 s 0.42 s' (' joined' after the ttft when the turn was
    another request's, computed once for both)."""
    parts = [method, path, str(status or "-")]
    if turn:
        if turn.get("session") is not None:
            parts.append(f"session=#{turn['session']}")
        parts.append(f"cached={turn['cached']:,}/{turn['prompt']:,}")
        parts.append(f"prefilled={turn['prefilled']:,} generated={turn['generated']:,} "
                     f"ttft={turn['ttft']:.2f} s")
        if turn.get("joined"):
            parts.append("joined")
    return " ".join(parts) + f" {seconds:.2f} s"


class AccessLog:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        slot: dict[str, Any] = {}
        token = _TURN.set(slot)
        start, status = time.monotonic(), 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, sending)
        finally:
            _TURN.reset(token)
            first = slot.pop("first_token_at", None)
            if first is not None and "ttft" in slot:
                slot["ttft"] = max(0.0, first - start)
            log.info(line(scope.get("method", "?"), scope.get("path", "?"), status,
                          time.monotonic() - start, slot))
