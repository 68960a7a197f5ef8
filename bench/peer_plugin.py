"""pytest plugin for bench/peer_suite.py: llama.cpp's own server tests with
their server start replaced by `mlxchat serve`.

Loaded with ``-p peer_plugin`` inside the pytest run over a llama.cpp
checkout's ``tools/server/tests``: ``ServerProcess.start`` starts (once per
API key and window) a real `mlxchat serve` on 127.0.0.1 with their server's
defaults translated to ours (its key as the key, any origin allowed as theirs
allows, their preset's 64-token default reply as max_tokens, their ``n_ctx``
as ``--context``: see ``window``), and points the test at it; ``stop`` leaves
it for the next test; nothing is downloaded. Their
OpenAI routes without ``/v1`` (``/chat/completions``, ``/models``) are sent to
ours with it, and a chat, completion or message request names the served
model (theirs name none or a placeholder, which their server takes for the
one it runs). Each test's outcome, the requests it made (path, fields,
status), the server options it changed and its first failing assertion go to
``$PEER_OUT``, one JSON object a line, for the bench to class.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import types
from urllib.parse import urlsplit, urlunsplit

import pytest

TESTS = os.environ["PEER_TESTS"]
OUT = os.environ["PEER_OUT"]
MODEL = os.environ.get("PEER_MODEL", "smollm2-135m")
HOME = os.environ["PEER_HOME"]
START_TIMEOUT_S = 600
ALIASES = {"/chat/completions": "/v1/chat/completions", "/models": "/v1/models"}
"""llama.cpp serves OpenAI's routes without /v1 too; ours have it."""
NAMED = {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens"}
"""Routes whose body names the model: their tests name none or a placeholder
("test", "gpt-3.5-turbo"; their server answers any), a client of ours names ours."""
TRANSLATED = {"api_key", "cors_origins", "n_predict"}
"""Their server options ours honours (the key, CORS, the default reply length);
``n_ctx`` too where ``window`` translates it."""
LEAST_CONTEXT = 256
"""The smallest ``--context`` ours takes (``context_window``'s rule)."""

sys.path.insert(0, TESTS)
sys.modules.setdefault("wget", types.ModuleType("wget"))  # utils imports it; nothing downloads
import requests  # noqa: E402
import utils  # noqa: E402

_servers: dict[tuple[str | None, int | None], tuple[subprocess.Popen, int]] = {}
"""(key, --context) -> the server started for them and its port."""
_recorded: list[dict] = []
_current: dict = {}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(home: str) -> None:
    """Their preset's default reply length (n_predict 64) as ours."""
    folder = os.path.join(home, "config")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.toml"), "w") as fh:
        fh.write("[generation]\nmax_tokens = 64\n")


def _die_with_this_process() -> None:
    """In the child: SIGTERM when the test run ends, however it ends (Linux)."""
    if sys.platform == "linux":
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def window(server) -> int | None:
    """Their ``n_ctx`` as our ``--context``. Their server divides ``n_ctx`` among
    its ``n_slots`` slots, one conversation each, and their tests expect a
    conversation's window to be ``n_ctx // n_slots`` (the whole ``n_ctx`` with
    ``kv_unified``, where the slots share it); ours is a window per conversation,
    so it gets that quotient. None (the model's window): no ``n_ctx``, or a
    quotient below ours' least."""
    if not server.n_ctx:
        return None
    slots = 1 if getattr(server, "kv_unified", False) or not server.n_slots else server.n_slots
    per_conversation = int(server.n_ctx) // int(slots)
    return per_conversation if per_conversation >= LEAST_CONTEXT else None


def _launch(key: str | None, context: int | None) -> int:
    """A server for ``key`` at ``context``; one past the model's window (refused
    at start, exit status 2) is served at the model's window instead."""
    port = _free_port()
    home = os.path.join(HOME, f"key-{len(_servers)}")
    _config(home)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLXCHAT_HOME": home}
    env.pop("MLXCHAT_API_KEY", None)
    if key:
        env["MLXCHAT_API_KEY"] = key
    log = open(os.path.join(HOME, f"serve-{port}.log"), "w")
    sized = ["--context", str(context)] if context else []
    proc = subprocess.Popen([sys.executable, "-m", "mlxchat", "serve", "--model", MODEL,
                             "--port", str(port), "--cors", "*", *sized],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            env=env, preexec_fn=_die_with_this_process)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if proc.returncode == 2 and context:  # past the model's window
                port = _servers[(key, None)][1] if (key, None) in _servers else _launch(key, None)
                _servers[(key, context)] = _servers[(key, None)]
                return port
            raise RuntimeError(f"mlxchat serve exited {proc.returncode}; see {log.name}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=5,
                            headers={"Authorization": f"Bearer {key}"} if key else {}
                            ).status_code == 200:
                _servers[(key, context)] = (proc, port)
                return port
        except requests.RequestException:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("mlxchat serve did not start in time")


_preset = vars(utils.ServerPreset.tinyllama2()).copy()


def _start(self, timeout_seconds=None) -> None:
    served = (self.api_key, window(self))
    port = _servers[served][1] if served in _servers else _launch(*served)
    self.server_host, self.server_port = "127.0.0.1", port
    changed = {k: v for k, v in vars(self).items()
               if k not in ("process", "server_host", "server_port", "ready")
               and _preset.get(k, getattr(utils.ServerProcess, k, None)) != v}
    translated = TRANSLATED | ({"n_ctx"} if served[1] else set())
    _current["options"] = {k: repr(v)[:80] for k, v in changed.items() if k not in translated}


utils.ServerProcess.start = _start
utils.ServerProcess.stop = lambda self: None
utils.ServerPreset.load_all = staticmethod(lambda: None)


def _json(body) -> dict:
    try:
        data = json.loads(body) if body else None
    except (ValueError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}


def _fields(body) -> list[str]:
    return sorted(_json(body))


def _choice(body) -> str | None:
    """The request's tool_choice, when it forces a call ("required", a name)."""
    choice = _json(body).get("tool_choice")
    return None if choice in (None, "auto", "none") else json.dumps(choice)


def _aliased(path: str) -> str:
    return ALIASES.get(path, path)


def _named(path: str, body):
    """The body with ``model`` set to the served model (None: leave it as it is)."""
    if path not in NAMED or not body:
        return None
    try:
        data = json.loads(body)
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict):
        return None
    return json.dumps({**data, "model": MODEL}).encode()


_plain_send = requests.Session.send


def _send(self, request, **kwargs):
    parts = urlsplit(request.url)
    request.url = urlunsplit(parts._replace(path=_aliased(parts.path)))
    body = _named(urlsplit(request.url).path, request.body)
    if body is not None:
        request.body = body
        request.headers["Content-Length"] = str(len(body))
    response = _plain_send(self, request, **kwargs)
    _recorded.append({"method": request.method, "path": urlsplit(request.url).path,
                      "fields": _fields(request.body), "status": response.status_code,
                      "forced": _choice(request.body),
                      "error": "" if response.ok else response.text[:300]})
    return response


requests.Session.send = _send

try:
    import httpx2

    _plain_httpx = httpx2.Client.send

    def _httpx_send(self, request, **kwargs):
        url = request.url.copy_with(path=_aliased(request.url.path))
        body = _named(url.path, request.content)
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        request = httpx2.Request(request.method, url, headers=headers,
                                 content=request.content if body is None else body,
                                 extensions=request.extensions)
        response = _plain_httpx(self, request, **kwargs)
        failed = response.status_code >= 400
        if failed:
            response.read()  # kept: the client reads it again
        _recorded.append({"method": request.method, "path": request.url.path,
                          "fields": _fields(request.content), "status": response.status_code,
                          "forced": _choice(request.content),
                          "error": response.text[:300] if failed else ""})
        return response

    httpx2.Client.send = _httpx_send
except ImportError:  # an openai client on httpx: its requests go unrecorded
    pass


def pytest_runtest_setup(item) -> None:
    _recorded.clear()
    _current.clear()


def _assertion(item, excinfo) -> dict:
    entries = list(excinfo.traceback)
    in_test = [e for e in entries if str(e.path) == str(item.path)]
    where = in_test[-1] if in_test else entries[-1]
    crash = entries[-1]
    return {"line": str(where.statement).strip()[:300],
            "crash": str(crash.statement).strip()[:300] if crash is not where else "",
            "error": excinfo.typename, "message": str(excinfo.value)[:600]}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and not report.passed):
        record = {"id": item.nodeid, "outcome": report.outcome, "requests": list(_recorded),
                  "options": _current.get("options", {})}
        if report.failed and call.excinfo is not None:
            record.update(_assertion(item, call.excinfo))
        with open(OUT, "a") as fh:
            fh.write(json.dumps(record) + "\n")


def pytest_unconfigure(config) -> None:
    for proc in {id(proc): proc for proc, _ in _servers.values()}.values():
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
