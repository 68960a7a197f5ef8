"""What a connection may hold before it is a request: uvicorn's h11 protocol
with a cap on open connections (past it, a 503 at once, below the process's
descriptor limit), a timeout on a request's headers (a client that sends
half a header and waits is closed with a 408) and one on its whole body
(headers sent whole, then a body that trickles: a 408 too), so idle or slow
sockets can never keep other clients out. The API key is checked only once
the headers are in, so this comes first."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from mlxchat.server.options import DEFAULT_BODY_TIMEOUT_S

HEADER_TIMEOUT_S = 10.0
"""How long a connection may take to send a request's headers."""
KEPT_DESCRIPTORS = 256
"""Descriptors left for everything else (the database, KV segments, the
model's files) when the connection cap comes from the open-file limit."""
MAX_CONNECTIONS = 16_384
LINGER_S = 2.0
"""How long a refused connection is drained after its 408 before it is closed:
closed at once with the client's bytes unread, the kernel resets it and the
client never reads the answer."""


def connection_cap(soft_limit: int) -> int:
    """Open connections allowed under a soft open-file limit of ``soft_limit``."""
    kept = min(KEPT_DESCRIPTORS, soft_limit // 4)
    return max(8, min(MAX_CONNECTIONS, soft_limit - kept))


def _raw_response(status: int, reason: str, code: str, message: str,
                  extra: str = "") -> bytes:
    body = json.dumps({"error": {"message": message, "type": "server_error", "param": None,
                                 "code": code}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n").encode() + body


TOO_MANY = _raw_response(503, "Service Unavailable", "too_many_connections",
                         "The server has too many connections open; retry shortly.",
                         "retry-after: 1\r\n")
TOO_SLOW = _raw_response(408, "Request Timeout", "request_timeout",
                         "The request's headers did not arrive in time.")


def body_too_slow(timeout_s: float) -> bytes:
    return _raw_response(408, "Request Timeout", "request_timeout",
                         f"The request's body did not arrive within {timeout_s:g} s.")


def guarded_protocol(*, max_connections: int, header_timeout_s: float = HEADER_TIMEOUT_S,
                     body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S) -> type[H11Protocol]:
    """uvicorn's h11 protocol class with the cap and the header and body timeouts."""
    body_late = body_too_slow(body_timeout_s)

    class GuardedProtocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None
        _lingering = False

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.write(TOO_MANY)
                transport.close()
                return
            self._await_headers()

        def data_received(self, data: bytes) -> None:
            if self._lingering:
                return  # refused: drained, never parsed
            super().data_received(data)
            if self.transport.is_closing():
                return
            # A request begun, its headers not in (the first, or the next on a
            # connection kept alive, which the keep-alive timeout no longer covers).
            state = self.conn.their_state
            if state is h11.IDLE:
                if self._header_timer is None:
                    self._await_headers()
                return
            self._headers_in()
            if state is h11.SEND_BODY:  # one deadline for the whole body, never reset
                if self._body_timer is None:
                    self._body_timer = self.loop.call_later(body_timeout_s, self._body_late)
            else:
                self._body_in()

        def connection_lost(self, exc: Exception | None) -> None:
            self._headers_in()
            self._body_in()
            super().connection_lost(exc)

        def _body_in(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _body_late(self) -> None:
            self._body_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
                return
            cycle = self.cycle
            if cycle is None or not cycle.response_started:  # else a reply is under way
                self.transport.write(body_late)
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True  # the app's read of the body ends
                cycle.message_event.set()
            self._linger()

        def _linger(self) -> None:
            """Close once the client has read the answer: our side shut now, its
            bytes drained until it closes too or ``LINGER_S`` passes."""
            self._lingering = True
            self.flow.resume_reading()
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)

        def _await_headers(self) -> None:
            self._header_timer = self.loop.call_later(header_timeout_s, self._too_slow)

        def _headers_in(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if self.conn.our_state is h11.IDLE:
                self.transport.write(TOO_SLOW)
            self._linger()

    return GuardedProtocol
