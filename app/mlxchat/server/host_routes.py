"""The host's own route (``GET /health``) and the listing of every route the
server mounts, by API, made from the protocols' route tables: ``serve --help``
and the start line say what is served, a new protocol's routes included."""

from __future__ import annotations

import textwrap
from types import ModuleType

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mlxchat.server.core.service import ChatService

HEALTH_PATH = "/health"


async def health(request: Request) -> Response:
    """200 while the server answers (it listens only once the model is loaded and
    warm). Asked without the key a keyed server needs, only the status: probes
    (a load balancer, Docker) carry none."""
    service: ChatService = request.app.state.service
    body: dict[str, object] = {"status": "ok"}
    if request.scope.get("mlxchat.key_given", True):
        body.update(model=service.model_id, parallel=service.parallel,
                    answered=service.answered)
    return JSONResponse(body)


HOST_ROUTES = [Route(HEALTH_PATH, health, methods=["GET"])]


def api_name(router: ModuleType) -> str:
    """A protocol's name: its router's ``API``, else its package's name."""
    return getattr(router, "API", None) or router.__name__.split(".")[-2].capitalize()


def listing(routers: tuple[ModuleType, ...]) -> list[tuple[str, list[str], list[str]]]:
    """(API, paths served, paths refused in words) per protocol, in order."""
    out = []
    for router in routers:
        served = [r.path for r in router.ROUTES if r.include_in_schema]
        refused = [r.path for r in router.ROUTES if not r.include_in_schema]
        out.append((api_name(router), list(dict.fromkeys(served)),
                    list(dict.fromkeys(refused))))
    return out


def _common_base(paths: list[str]) -> str:
    """'/v1' for /v1/chat/completions and /v1/models."""
    parts = [p.strip("/").split("/") for p in paths]
    base: list[str] = []
    for pieces in zip(*parts):
        if len(set(pieces)) != 1:
            break
        base.append(pieces[0])
    if base and any(len(p) == len(base) for p in parts):
        base.pop()  # a path that is the base itself
    return "/" + "/".join(base) if base else ""


def start_line_routes(url: str, routers: tuple[ModuleType, ...]) -> str:
    """'URL/v1 (OpenAI: chat/completions, models), URL/api (Ollama: chat), URL/health'."""
    groups = []
    for api, served, _ in listing(routers):
        base = _common_base(served)
        names = ", ".join(p[len(base) + 1:] for p in served)
        groups.append(f"{url}{base} ({api}: {names})")
    return ", ".join(groups + [f"{url}{HEALTH_PATH}"])


def help_text(routers: tuple[ModuleType, ...]) -> str:
    """The routes, one API a paragraph, for ``serve --help``."""
    lines = ["routes:"]
    for api, served, refused in listing(routers):
        lines.append(textwrap.fill(f"{api}: " + ", ".join(served), 78, initial_indent="  ",
                                   subsequent_indent="    "))
        if refused:
            lines.append(textwrap.fill("refused in words: " + ", ".join(refused), 78,
                                       initial_indent="    ", subsequent_indent="      "))
    lines.append(f"  the server: {HEALTH_PATH} (no key needed)")
    return "\n".join(lines)
