"""Browsers and probes: CORS is off unless `serve --cors ORIGIN` (a request
from another origin is a 403 in words, its preflight too, and nothing runs);
an allowed origin's preflight is answered and its replies carry the headers;
/health answers without the key; `serve --help` and the start line list every
route of every protocol, from the routes the app mounts."""

from __future__ import annotations

import importlib
import types

import pytest
from starlette.routing import Route

from mlxchat.server.host_routes import help_text, start_line_routes
from mlxchat.server.protocols import PROTOCOLS

from tests.server.conftest import request, serve

cli = importlib.import_module("mlxchat.cli.main")
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
SITE = "http://localhost:3000"


def preflight(url: str, origin: str, path: str = "/v1/chat/completions", **extra: str):
    return request(url, "OPTIONS", path, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
        **extra})


@pytest.fixture
def cors_served(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db", cors=(SITE,), api_key="s3cret")
    yield running
    running.stop()


def test_without_cors_a_browsers_request_is_refused_and_nothing_runs(served):
    ask = preflight(served.url, SITE)
    assert ask.status == 403 and "access-control-allow-origin" not in ask.headers
    assert "start the server with --cors http://localhost:3000" in ask.json()["error"]["message"]
    sent = request(served.url, "POST", "/api/chat", CHAT, headers={"Origin": "https://evil.test"})
    assert sent.status == 403 and "--cors https://evil.test" in sent.json()["error"]
    assert served.service.answered == 0
    assert not [s for s in served.conv.store.list_sessions() if s.from_api]
    assert request(served.url, "POST", "/v1/chat/completions", CHAT).status == 200  # no Origin


def test_an_allowed_origins_preflight_is_answered_without_the_key(cors_served):
    ask = preflight(cors_served.url, SITE, **{"Access-Control-Request-Private-Network": "true"})
    assert ask.status == 200
    assert ask.headers["access-control-allow-origin"] == SITE
    allowed = {h.strip() for h in ask.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "x-api-key", "anthropic-version", "content-type",
            "x-stainless-os"} <= allowed
    assert "POST" in ask.headers["access-control-allow-methods"]
    assert ask.headers["access-control-allow-private-network"] == "true"
    other = preflight(cors_served.url, "http://localhost:3001")
    assert other.status == 403


def test_an_allowed_origins_replies_carry_the_headers_errors_too(cors_served):
    key = {"Origin": SITE, "Authorization": "Bearer s3cret"}
    ok = request(cors_served.url, "POST", "/v1/chat/completions", CHAT, headers=key)
    assert ok.status == 200 and ok.headers["access-control-allow-origin"] == SITE
    assert "X-Cache-Miss" in ok.headers["access-control-expose-headers"]
    refused = request(cors_served.url, "POST", "/v1/messages", {}, headers={"Origin": SITE})
    assert refused.status == 401 and refused.headers["access-control-allow-origin"] == SITE


def test_any_origin_with_a_star(tiny, tmp_path):
    running = serve(tiny, tmp_path / "s.db", cors=("*",))
    try:
        ask = preflight(running.url, "https://app.example.org")
        assert ask.status == 200
        assert ask.headers["access-control-allow-origin"] == "https://app.example.org"
    finally:
        running.stop()


def test_health_answers_probes_without_the_key_and_says_more_with_it(cors_served):
    bare = request(cors_served.url, "GET", "/health")
    assert bare.status == 200 and bare.json() == {"status": "ok"}
    keyed = request(cors_served.url, "GET", "/health", headers={"x-api-key": "s3cret"}).json()
    assert keyed["status"] == "ok" and keyed["model"] == "tiny"
    assert request(cors_served.url, "GET", "/v1/models").status == 401  # the rest needs it


@pytest.mark.parametrize("origin", ["localhost:3000", "http://x.test/path", "", "ftp:/x"])
def test_a_bad_cors_origin_is_refused_in_one_line(origin, capsys, monkeypatch):
    monkeypatch.setattr(cli, "_need_terminal", lambda: None)
    assert cli.main(["serve", "--tui", "--cors", origin]) == 2
    err = capsys.readouterr().err
    assert "--cors takes an origin" in err and err.count("\n") == 1


def _paths() -> list[str]:
    return [r.path for router in PROTOCOLS for r in router.ROUTES]


def test_help_lists_every_route_of_every_protocol(capsys):
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    out = capsys.readouterr().out
    for path in [*_paths(), "/health"]:
        assert path in out, path
    for router in PROTOCOLS:
        assert f"{router.API}:" in out


def test_the_start_line_names_every_api_and_route():
    line = start_line_routes("http://127.0.0.1:8000", PROTOCOLS)
    assert line.startswith("http://127.0.0.1:8000/v1 (OpenAI: chat/completions")
    served = [r.path for router in PROTOCOLS for r in router.ROUTES if r.include_in_schema]
    for path in served:
        base, _, name = path.rpartition("/")
        assert name in line, path
    assert "/api (Ollama: chat, generate" in line and line.endswith("8000/health")


def test_a_new_protocols_routes_are_listed_without_naming_them_anywhere():
    async def nothing(request):  # pragma: no cover - never called
        return None

    extra = types.ModuleType("mlxchat.server.example.api_router")
    extra.ROUTES = [Route("/v1/example", nothing, methods=["POST"]),
                    Route("/v1/example/{item}", nothing, methods=["GET"])]
    routers = (*PROTOCOLS, extra)
    assert "Example: /v1/example, /v1/example/{item}" in help_text(routers)
    assert "/v1 (Example: example, example/{item})" in start_line_routes("", routers)
