"""uvicorn on a thread of its own: started, its address known, stopped in
bounded time (the command line and the tests run it the same way)."""

from __future__ import annotations

import threading
import time

import uvicorn
from starlette.types import ASGIApp

from mlxchat.errors import MlxchatError
from mlxchat.open_files import raise_soft_limit
from mlxchat.server.connections import HEADER_TIMEOUT_S, connection_cap, guarded_protocol
from mlxchat.server.options import DEFAULT_BODY_TIMEOUT_S


class ServerFailed(MlxchatError):
    """The server could not start (the port is taken, say)."""


class RunningServer:
    def __init__(self, app: ASGIApp, *, host: str, port: int,
                 max_connections: int | None = None,
                 header_timeout_s: float = HEADER_TIMEOUT_S,
                 body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S):
        # Every connection holds a descriptor: as many as the hard limit allows,
        # and a cap below them (``max_connections``, else from the limit).
        self.max_connections = max_connections or connection_cap(raise_soft_limit())
        protocol = guarded_protocol(max_connections=self.max_connections,
                                    header_timeout_s=header_timeout_s,
                                    body_timeout_s=body_timeout_s)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                lifespan="off", timeout_graceful_shutdown=3,
                                access_log=False, http=protocol)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="mlxchat-http",
                                        daemon=True)
        self.host = host
        self.port = port

    def start(self, timeout_s: float = 20.0) -> RunningServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ServerFailed(f"the server did not start on {self.host}:{self.port} "
                                   "(is the port in use?)")
            time.sleep(0.01)
        sockets = self._server.servers[0].sockets if self._server.servers else []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def wait(self) -> None:
        """Until the server stops (ctrl-c in the main thread raises here)."""
        while self._thread.is_alive():
            self._thread.join(0.2)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(2.0)
