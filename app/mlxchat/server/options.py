"""Where and how to serve, checked before anything starts (light: the chat
imports it at start-up without the HTTP stack)."""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass

from mlxchat.errors import UsageError

DEFAULT_KV_BUDGET = 8_000_000_000
"""Disk for the API sessions' KV segments unless told otherwise (`--kv-budget`):
`mlxchat serve` and the chat's `/serve` alike."""
DEFAULT_BODY_TIMEOUT_S = 30.0
"""How long a request may take to send its whole body once its headers are in
(`--body-timeout`; the 16 MB body limit at 30 s needs ~560 KB/s)."""

DEFAULT_PARALLEL = 8
"""Conversations decoded at once (`--parallel`). bench/serve_batch.py, 8 clients
at once, bundled model, 2-core x86 VM at load ~8: aggregate 6.7 / 16.6 / 19.9
tok/s at --parallel 2 / 4 / 8 (still growing at 8; p95 TTFT 10.2 s at 4, 5.3 s
at 8). The memory check holds members back where 8 caches do not fit."""
MAX_PARALLEL = 64


_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/?#\s]+")


class BindRefused(UsageError):
    """A bind beyond loopback without an API key."""


@dataclass(frozen=True)
class ServeOptions:
    """The command line's `serve` options."""

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    queue: int = 8
    kv_budget_bytes: int | None = DEFAULT_KV_BUDGET
    """None: no budget (the segments are never trimmed)."""
    parallel: int = DEFAULT_PARALLEL
    """Conversations decoded at once, in one batch (1: one at a time)."""
    allow_image_urls: bool = False
    """Fetch http(s) image URLs of requests (else only data URLs are taken)."""
    private_image_urls: bool = False
    """Those URLs may reach loopback, LAN and link-local addresses too."""
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    """A request's whole body must arrive within this once its headers are in."""
    cors: tuple[str, ...] = ()
    """Origins browsers may call the server from (``*``: any); none: no browser may."""
    context_policy: str = "stop"
    """What a history past the window gets when its request names no
    ``context_policy``: stop (a 400, as OpenAI answers), compact or drop_oldest."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    if not is_loopback(host) and not api_key:
        raise BindRefused(f"binding to {host} serves every machine that reaches it: "
                          "give a key with --api-key-file PATH, $MLXCHAT_API_KEY or "
                          "--api-key KEY (clients send it as a Bearer token), "
                          "or bind to 127.0.0.1")


def check_options(options: ServeOptions) -> None:
    """Refuse bad options in one line (exit status 2), before anything starts."""
    check_bind(options.host, options.api_key)
    if not 0 <= options.port < 65536:
        raise UsageError(f"--port must be 0 to 65535; got {options.port}")
    if not 1 <= options.parallel <= MAX_PARALLEL:
        raise UsageError(f"--parallel must be 1 to {MAX_PARALLEL}; got {options.parallel}")
    if options.queue < 1:
        raise UsageError(f"--queue must be at least 1; got {options.queue}")
    if not (math.isfinite(options.body_timeout_s) and 0 < options.body_timeout_s <= 3600):
        raise UsageError("--body-timeout must be a number of seconds above 0 and at most "
                         f"3600; got {options.body_timeout_s:g}")


def check_origins(origins: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``--cors`` values: ``*``, ``null`` or ``scheme://host[:port]`` (no path);
    a bad one is refused in one line."""
    out = []
    for given in origins:
        origin = given.strip().rstrip("/")
        if origin not in ("*", "null") and not _ORIGIN.fullmatch(origin.lower()):
            raise UsageError(f"--cors takes an origin such as http://localhost:3000 (scheme, "
                             f"host and port, no path), null or *; got {given!r}")
        out.append(origin if origin in ("*", "null") else origin.lower())
    return tuple(out)
