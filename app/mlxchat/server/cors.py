"""Browsers' cross-origin requests (CORS), off unless ``serve --cors ORIGIN``.

A request that carries an ``Origin`` the server was not told to allow gets a
403 in the API's shape, saying which flag allows it: its preflight (a
browser's ``OPTIONS``) and the request itself, so a web page cannot make the
server compute and store a conversation by a request the browser sends
without asking (a form, a text/plain POST). An allowed origin's preflight is
answered with the methods and every header the browser asks to send
(Authorization, x-api-key, anthropic-version, content-type, the SDKs' own),
and its replies carry ``Access-Control-Allow-Origin`` (the origin itself, so
credentials mode works too) and expose the server's own headers."""

from __future__ import annotations

from typing import Callable

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlxchat.server.core.errors import ApiError, Dialect

METHODS = "GET, POST, DELETE, OPTIONS"
HEADERS = ("authorization", "content-type", "x-api-key", "anthropic-version", "anthropic-beta",
           "x-session")
"""Allowed in any case; a preflight's own list is allowed as well."""
EXPOSED = "X-Cache-Miss, X-Max-Tokens-Capped, Retry-After"
MAX_AGE_S = 600


class Cors:
    """The ASGI middleware: outside the API key check (a preflight carries no key)."""

    def __init__(self, app: ASGIApp, origins: tuple[str, ...],
                 dialect: Callable[[str], Dialect]):
        self.app = app
        self.origins = origins
        self.dialect = dialect
        """The error shape for a path."""

    def allows(self, origin: str) -> bool:
        return "*" in self.origins or origin.rstrip("/").lower() in self.origins \
            or (origin == "null" and "null" in self.origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        preflight = scope["method"] == "OPTIONS" and "access-control-request-method" in headers
        if not self.allows(origin):
            flag = "--cors " + (origin if origin != "null" else "null")
            error = ApiError(403, f"Cross-origin requests from {origin[:200]} are not allowed; "
                             f"start the server with {flag} to allow them.",
                             code="origin_not_allowed", kind="permission_error")
            await error.response(self.dialect(scope["path"]))(scope, receive, send)
            return
        if preflight:
            await self._preflight(origin, headers)(scope, receive, send)
            return

        async def send_with_origin(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(b"access-control-allow-origin", origin.encode("latin-1")),
                         (b"access-control-expose-headers", EXPOSED.encode()),
                         (b"vary", b"Origin")]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_origin)

    def _preflight(self, origin: str, headers: Headers) -> Response:
        asked = [h.strip().lower() for h in headers.get("access-control-request-headers",
                                                        "").split(",") if h.strip()]
        allowed = list(dict.fromkeys([*HEADERS, *asked]))
        reply = {"Access-Control-Allow-Origin": origin, "Access-Control-Allow-Methods": METHODS,
                 "Access-Control-Allow-Headers": ", ".join(allowed),
                 "Access-Control-Max-Age": str(MAX_AGE_S), "Vary": "Origin"}
        if headers.get("access-control-request-private-network") == "true":
            reply["Access-Control-Allow-Private-Network"] = "true"  # Chrome's, to loopback
        return Response(status_code=200, headers=reply)  # 200, as Starlette and llama.cpp answer
