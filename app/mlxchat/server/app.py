"""The ASGI app: routes, the API key checked on every request, and every error
answered in the API's own shape (never a traceback)."""

from __future__ import annotations

import hmac
import logging
import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from mlxchat.server.core.access_log import AccessLog
from mlxchat.server.core.embeddings import Embeddings
from mlxchat.server.core.errors import ApiError, Dialect, internal
from mlxchat.server.core.image_fetch import FetchLimits
from mlxchat.server.core.service import ChatService
from mlxchat.server.core.streaming import ClientGone
from mlxchat.server.cors import Cors
from mlxchat.server.host_routes import HEALTH_PATH, HOST_ROUTES
from mlxchat.server.options import ServeOptions
from mlxchat.server.protocols import PROTOCOLS

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
PING_S = 5.0
"""A stream that starts before its first token (Anthropic's, OpenAI's chat)
sends a ping or a comment line at least this often while the prompt is read
or the request waits, so no client times out and sends it again."""
MAX_HEADER_BYTES = 16 * 1024
"""A request's headers together: h11's bound on headers that arrive in parts,
held too for those that arrive in one read (which h11 takes whole)."""


def _dialect(path: str) -> Dialect:
    if path.startswith("/v1/messages"):
        return "anthropic"
    return "ollama" if path.startswith("/api/") else "openai"


class HeaderLimit:
    """Headers past ``MAX_HEADER_BYTES`` together: a 431, before anything reads them."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and sum(len(k) + len(v) + 4 for k, v in scope["headers"]) \
                > MAX_HEADER_BYTES:
            error = ApiError(431, f"The request's headers are over {MAX_HEADER_BYTES:,} bytes.",
                             code="request_header_fields_too_large")
            await error.response(_dialect(scope["path"]))(scope, receive, send)
            return
        await self.app(scope, receive, send)


class ApiKeyCheck:
    """Every request carries the key (``Authorization: Bearer KEY`` or
    ``x-api-key``), compared in constant time; else 401. ``/health`` answers
    without it (saying less)."""

    def __init__(self, app: ASGIApp, api_key: str | None):
        self.app = app
        self.key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.key is None:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"x-api-key", b"")
        auth = headers.get(b"authorization", b"")
        if auth[:7].lower() == b"bearer ":
            given = auth[7:].strip()
        if not hmac.compare_digest(given, self.key):
            if scope["path"] == HEALTH_PATH:
                await self.app({**scope, "mlxchat.key_given": False}, receive, send)
                return
            error = ApiError(401, "Missing or wrong API key.", code="invalid_api_key",
                             kind="authentication_error")
            await error.response(_dialect(scope["path"]))(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response(_dialect(request.url.path))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return ApiError(exc.status_code, str(exc.detail), code=code).response(
        _dialect(request.url.path))


async def _client_gone(request: Request, exc: Exception) -> Response:
    return Response(status_code=499)  # nginx's "client closed request": nobody reads it


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("request failed: %s %s", request.method, request.url.path)
    return internal().response(_dialect(request.url.path))


def image_limits(options: ServeOptions) -> FetchLimits:
    """How the image URLs of requests are fetched under ``options``."""
    return FetchLimits(private=options.private_image_urls)


def build_app(service: ChatService, *, api_key: str | None = None,
              max_body_bytes: int = MAX_BODY_BYTES, allow_image_urls: bool = False,
              image_fetch: FetchLimits = FetchLimits(), cors: tuple[str, ...] = (),
              embeddings: Embeddings | None = None, ping_s: float = PING_S) -> ASGIApp:
    """``image_fetch``: how far an allowed image URL is fetched (with
    ``allow_image_urls``; never otherwise); ``cors``: the origins browsers may
    call it from (``server.cors``); ``ping_s``: how long a stream started
    before its first token stays silent at most."""
    routes = [*(r for router in PROTOCOLS for r in router.ROUTES), *HOST_ROUTES]
    app = Starlette(routes=routes, exception_handlers={
        ApiError: _api_error, HTTPException: _http_error, ClientGone: _client_gone,
        Exception: _unexpected})
    app.state.service = service
    app.state.max_body_bytes = max_body_bytes
    app.state.allow_image_urls = allow_image_urls
    app.state.image_fetch = image_fetch
    app.state.embeddings = embeddings or Embeddings()
    app.state.started_at = time.time()
    app.state.ping_s = ping_s
    return AccessLog(HeaderLimit(Cors(ApiKeyCheck(app, api_key), cors, _dialect)))
