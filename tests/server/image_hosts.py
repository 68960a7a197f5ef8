"""Small HTTP servers on 127.0.0.1 that an allowed image URL is fetched from:
a good one, one that trickles, one that redirects to ftp://, one that
redirects forever, one that sends without end, one that declares a huge
body. Each path records what happened, so tests wait for states."""

from __future__ import annotations

import http.server
import threading
from dataclasses import dataclass, field

GOOD = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
"""What /good.png serves (the fetch checks no format: the image check does)."""


@dataclass
class Seen:
    """What the servers saw and did."""

    stop: threading.Event = field(default_factory=threading.Event)
    trickling: threading.Event = field(default_factory=threading.Event)
    """/trickle has sent its headers and began its body."""
    trickle_gone: threading.Event = field(default_factory=threading.Event)
    """/trickle's client closed before the body was whole."""
    endless_gone: threading.Event = field(default_factory=threading.Event)
    endless_sent: int = 0
    hits: dict[str, int] = field(default_factory=dict)


def _handler(seen: Seen) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?")[0]
            seen.hits[path.split("/")[1]] = seen.hits.get(path.split("/")[1], 0) + 1
            route = {"/good.png": self._good, "/trickle": self._trickle,
                     "/to-ftp": lambda: self._redirect("ftp://127.0.0.1:9/x.png"),
                     "/relative": lambda: self._redirect("/good.png"),
                     "/endless": self._endless, "/declared-huge": self._declared_huge,
                     "/gzip": self._gzip}.get(path)
            if path.startswith("/loop/"):
                route = lambda: self._redirect(f"/loop/{int(path[6:]) + 1}")  # noqa: E731
            if route is None:
                self.send_error(404)
                return
            route()

        def _head(self, status: int, **headers: str) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()

        def _good(self) -> None:
            self._head(200, Content_Type="image/png", Content_Length=str(len(GOOD)))
            self.wfile.write(GOOD)

        def _redirect(self, where: str) -> None:
            self._head(302, Location=where, Content_Length="0")

        def _trickle(self) -> None:
            self._head(200, Content_Type="image/png", Content_Length="100000")
            seen.trickling.set()
            try:
                while not seen.stop.wait(0.02):
                    self.wfile.write(b"x")
                    self.wfile.flush()
            except OSError:
                seen.trickle_gone.set()

        def _endless(self) -> None:
            self._head(200, Content_Type="image/png")  # HTTP/1.0: the body ends at close
            chunk = b"\0" * 65536
            try:
                while not seen.stop.is_set():
                    self.wfile.write(chunk)
                    seen.endless_sent += len(chunk)
            except OSError:
                seen.endless_gone.set()

        def _declared_huge(self) -> None:
            self._head(200, Content_Type="image/png", Content_Length=str(10**10))
            seen.stop.wait(30)

        def _gzip(self) -> None:
            self._head(200, Content_Type="image/png", Content_Encoding="gzip",
                       Content_Length="4")
            self.wfile.write(b"\x1f\x8b\x08\x00")

    return Handler


class ImageHosts:
    """The servers, on one free 127.0.0.1 port; ``close()`` ends every handler."""

    def __init__(self) -> None:
        self.seen = Seen()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.seen))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def close(self) -> None:
        self.seen.stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
