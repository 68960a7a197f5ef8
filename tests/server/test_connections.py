"""Sockets that never finish a request cannot keep clients out: half-sent
headers are closed after the header timeout (slow-loris), connections past
the cap get a 503 at once instead of exhausting descriptors, and a real
`mlxchat serve` answers normal clients while 2,100 idle sockets are held
(its open-file limit is the one it was started with, not mlx-lm's 2048)."""

from __future__ import annotations

import json
import resource
import signal
import socket
import time
from pathlib import Path

from mlxchat.open_files import raise_soft_limit

from tests.server.conftest import request, serve
from tests.server.served_process import ServeProcess, end_all

HALF = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def _half_sent(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(HALF)
        socks.append(s)
    return socks


def _answer(sock: socket.socket, timeout_s: float) -> bytes:
    """What the server sends before it closes ``sock`` (b'' for a plain close)."""
    sock.settimeout(timeout_s)
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except (TimeoutError, socket.timeout):
        raise AssertionError(f"still open after {timeout_s} s; got {got[:120]!r}") from None
    except ConnectionResetError:
        pass
    return got


def test_half_sent_headers_are_closed_after_the_header_timeout(tiny, tmp_path):
    served = serve(tiny, tmp_path / "s.db", header_timeout_s=0.5)
    socks = []
    try:
        socks = _half_sent(served.server.port, 50)
        # A request that was answered and kept alive starts its next one slowly.
        kept = socket.create_connection(("127.0.0.1", served.server.port), timeout=30)
        kept.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while b'"object":"list"' not in first:
            first += kept.recv(4096)
        kept.sendall(b"GET /v1/models HTTP/1.1\r\n")
        for sock in socks + [kept]:
            said = _answer(sock, timeout_s=20)
            assert said.startswith(b"HTTP/1.1 408 ") and b'"request_timeout"' in said
        assert request(served.url, "GET", "/v1/models").status == 200
    finally:
        for sock in socks:
            sock.close()
        served.stop()


def test_connections_past_the_cap_get_a_503_at_once(tiny, tmp_path):
    served = serve(tiny, tmp_path / "s.db", max_connections=20, header_timeout_s=1.0)
    held = []
    try:
        held = [socket.create_connection(("127.0.0.1", served.server.port), timeout=30)
                for _ in range(20)]
        time.sleep(0.2)  # the server took them all
        for _ in range(3):
            extra = socket.create_connection(("127.0.0.1", served.server.port), timeout=30)
            said = _answer(extra, timeout_s=10)
            extra.close()
            assert said.startswith(b"HTTP/1.1 503 ")
            body = json.loads(said.split(b"\r\n\r\n", 1)[1])
            assert body["error"]["code"] == "too_many_connections"
            assert b"retry-after: 1" in said.lower()
        # The idle ones time out (and close once they read it); the cap frees up.
        for sock in held:
            _answer(sock, timeout_s=20)
            sock.close()
        assert request(served.url, "GET", "/v1/models").status == 200
    finally:
        for sock in held:
            sock.close()
        served.stop()


def _open_files(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-file limit")


IDLE = 2100


def test_a_real_server_answers_while_thousands_of_idle_sockets_are_held(tiny_model_dir):
    ours = raise_soft_limit()
    assert ours > IDLE + 200, f"this test needs {IDLE + 200} descriptors; the limit is {ours}"
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    started: list[ServeProcess] = []
    socks: list[socket.socket] = []
    try:
        served = ServeProcess(tiny_model_dir)
        started.append(served)
        port = served.wait_ready()
        assert _open_files(served.proc.pid) == (hard, hard)  # mlx-lm's import lowered neither
        socks = _half_sent(port, IDLE)
        for _ in range(3):
            ok = request(f"http://127.0.0.1:{port}", "GET", "/v1/models", timeout_s=30)
            assert ok.status == 200
        chat = request(f"http://127.0.0.1:{port}", "POST", "/v1/chat/completions",
                       {"model": tiny_model_dir.name, "max_tokens": 2,
                        "messages": [{"role": "user", "content": "hi"}]}, timeout_s=60)
        assert chat.status == 200
        assert "Too many open files" not in "".join(served.log)
    finally:
        for sock in socks:
            sock.close()
        if started:
            started[0].end(signal.SIGTERM)
        end_all(started)


def _trickle_until_answered(sock: socket.socket, drip: bytes, bound_s: float = 30.0) -> bytes:
    """Send ``drip`` a byte at a time, reading between bytes, until the server
    answers or closes; what it said (AssertionError if it never does)."""
    sock.settimeout(0.05)
    got, sent = b"", 0
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if sent < len(drip):
            try:
                sock.sendall(drip[sent:sent + 1])
                sent += 1
            except (BrokenPipeError, ConnectionResetError):
                return got + _answer(sock, timeout_s=5)
        try:
            chunk = sock.recv(4096)
        except (TimeoutError, socket.timeout):
            continue
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"still open after {bound_s} s ({sent} bytes sent); got {got[:120]!r}")


def test_a_body_that_trickles_after_whole_headers_is_closed_at_its_deadline(
        tiny, tmp_path, caplog):
    """Headers sent whole, then a body a byte at a time: 408 once the body's
    deadline passes (it is never reset by each byte), the request never reaches
    a turn, nothing is logged as a failure, and the server goes on answering.
    Headers trickled a byte at a time are closed at their own deadline too."""
    import logging

    caplog.set_level(logging.INFO)
    served = serve(tiny, tmp_path / "s.db", header_timeout_s=1.0, body_timeout_s=1.0)
    port = served.server.port
    body = json.dumps({"model": "tiny", "messages": [
        {"role": "user", "content": "x" * 5000}]}).encode()
    heads = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
             b"Content-Type: application/json\r\n"
             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    try:
        slow_body = socket.create_connection(("127.0.0.1", port), timeout=30)
        slow_body.sendall(heads)
        said = _trickle_until_answered(slow_body, body)
        slow_body.close()
        assert said.startswith(b"HTTP/1.1 408 "), said[:200]
        error = json.loads(said.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["code"] == "request_timeout"
        assert error["message"] == "The request's body did not arrive within 1 s."
        slow_heads = socket.create_connection(("127.0.0.1", port), timeout=30)
        said = _trickle_until_answered(slow_heads, heads * 100)
        slow_heads.close()
        assert said.startswith(b"HTTP/1.1 408 ") and b"headers did not arrive" in said
        failures = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert not failures, failures[0].getMessage()
        assert served.service.answered == 0
        assert all(s.message_count == 0 for s in served.conv.store.list_sessions())
        # A body sent whole on time (in two parts) is answered.
        ok = socket.create_connection(("127.0.0.1", port), timeout=30)
        small = json.dumps({"model": "tiny", "max_tokens": 2,
                            "messages": [{"role": "user", "content": "hi"}]}).encode()
        ok.sendall(heads.replace(str(len(body)).encode(), str(len(small)).encode())
                   + small[:10])
        ok.sendall(small[10:])
        said = b""
        while b"chat.completion" not in said:
            chunk = ok.recv(4096)
            assert chunk, said
            said += chunk
        ok.close()
        assert said.startswith(b"HTTP/1.1 200 ")
    finally:
        served.stop()


def test_serve_body_timeout_sets_the_deadline_of_a_real_server(tiny_model_dir):
    started: list[ServeProcess] = []
    try:
        served = ServeProcess(tiny_model_dir, "--body-timeout", "1.5")
        started.append(served)
        port = served.wait_ready()
        slow = socket.create_connection(("127.0.0.1", port), timeout=30)
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 100000\r\n\r\n")
        said = _trickle_until_answered(slow, b"x" * 100_000)
        slow.close()
        assert said.startswith(b"HTTP/1.1 408 ")
        assert b"did not arrive within 1.5 s" in said
    finally:
        end_all(started)
