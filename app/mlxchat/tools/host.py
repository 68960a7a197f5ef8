"""The tool host: the MCP SDK's clients, one per configured server, on one
asyncio event loop in a thread of their own (never Textual's loop, never the
engine's thread). Servers start when asked (in the background), calls come
from any thread and wait there, bounded; ``close`` stops every server,
bounded too.

A stdio server is spawned through ``launch.py``: it sees only the variables
its entry names plus ``BASE_ENV``, and it dies with this process even when
this process is killed (on Linux the kernel kills it when the host's thread,
which spawned it, ends).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mlxchat import __version__, paths
from mlxchat.tools import outcome
from mlxchat.tools.catalog import ToolInfo
from mlxchat.tools.config import BASE_ENV, ServerConfig, ToolsConfig, load_tools_config
from mlxchat.tools.outcome import CallOutcome

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 6.0
LOG_KEEP_BYTES = 1 << 20
MAX_MESSAGE_BYTES = 1 << 20
"""A stdio server's tool result over this is cut to its first MB of text by
the launcher, before the SDK reads it (``launch.py`` says why)."""
_POLL_S = 0.02
_LIST_PAGES = 20
LAUNCHER = Path(__file__).with_name("launch.py")


@dataclass
class ServerStatus:
    """A server as ``/tools`` shows it."""

    name: str
    state: str
    """'not started', 'starting', 'ready', 'failed' or 'exited'."""
    why: str = ""
    """One line: why it failed or exited."""
    tools: list[ToolInfo] = field(default_factory=list)
    describe: str = ""
    start_s: float | None = None
    """Seconds it took to start and list its tools."""


class _Server:
    """One server's connection, its state and its task on the host's loop."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state, self.why = "starting", ""
        self.tools: list[ToolInfo] = []
        self.client: Any = None
        self.settled = threading.Event()
        """Set once it is ready, or failed."""
        self.stopping: asyncio.Event | None = None
        self.task: asyncio.Task | None = None
        self.start_s: float | None = None
        self.log_path: Path | None = None

    def last_log_line(self) -> str:
        try:
            with open(self.log_path or "", "rb") as handle:
                handle.seek(max(0, handle.seek(0, os.SEEK_END) - 4096))
                lines = handle.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return next((ln.strip() for ln in reversed(lines) if ln.strip()), "")[:200]


def _tool_info(server: str, tool: Any) -> ToolInfo:
    hints = getattr(tool, "annotations", None)
    return ToolInfo(server, tool.name, (tool.description or "").strip(),
                    dict(tool.input_schema or {}), title=getattr(tool, "title", None),
                    read_only=getattr(hints, "read_only_hint", None),
                    destructive=getattr(hints, "destructive_hint", None),
                    idempotent=getattr(hints, "idempotent_hint", None),
                    open_world=getattr(hints, "open_world_hint", None))


class ToolHost:
    """Every configured server, started on demand; thread-safe."""

    def __init__(self, config: ToolsConfig, *, start_timeout_s: float = START_TIMEOUT_S,
                 log_dir: Path | None = None) -> None:
        self.config = config
        self.start_timeout_s = start_timeout_s
        self._log_dir = log_dir
        self._servers: dict[str, _Server] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.changes = 0
        """Grows whenever a server's tools appear or go: definitions made
        from them are stale."""

    # -- what there is -------------------------------------------------------------------
    def statuses(self) -> list[ServerStatus]:
        out = []
        with self._lock:
            for name in self.config.names:
                config = self.config.servers.get(name)
                server = self._servers.get(name)
                if config is None:
                    out.append(ServerStatus(name, "failed", self.config.problems[name]))
                elif server is None:
                    out.append(ServerStatus(name, "not started", describe=config.describe()))
                else:
                    out.append(ServerStatus(name, server.state, server.why, list(server.tools),
                                            config.describe(), server.start_s))
        return out

    def tools(self, names: Iterable[str]) -> list[ToolInfo]:
        """The tools of those of ``names`` that are ready."""
        with self._lock:
            return [t for n in names if (s := self._servers.get(n)) is not None
                    and s.state == "ready" for t in s.tools]

    def refresh(self) -> bool:
        """Read ``mcp.json`` again when it changed since it was read: new servers
        appear, and one whose entry changed or went is stopped (started again
        on demand under its new entry). True when the configuration changed."""
        if not self.config.changed_on_disk():
            return False
        config = load_tools_config(self.config.path)
        with self._lock:
            stale = [s for name, s in self._servers.items() if config.servers.get(name) != s.config]
            for server in stale:
                del self._servers[server.config.name]
            self.config = config
            self.changes += 1
            loop = self._loop
        for server in stale:
            if loop is not None and server.stopping is not None:
                loop.call_soon_threadsafe(server.stopping.set)
            elif loop is not None and server.task is not None:
                loop.call_soon_threadsafe(server.task.cancel)
        return True

    # -- starting ------------------------------------------------------------------------
    def start(self, names: Iterable[str], *, again: bool = False) -> list[str]:
        """Start those of ``names`` not running yet (in the background); one
        that exited starts again, one that failed only when ``again``.
        Returns the names that are starting now."""
        started = []
        for name in names:
            config = self.config.servers.get(name)
            with self._lock:
                old = self._servers.get(name)
                if config is None or (old is not None and (
                        old.state in ("starting", "ready")
                        or (old.state == "failed" and not again))):
                    continue
                server = self._servers[name] = _Server(config)
            self._submit(self._serve(server))
            started.append(name)
        return started

    def wait(self, names: Iterable[str], *, timeout_s: float | None = None,
             progress: Callable[[str, int, int], None] | None = None,
             cancel: threading.Event | None = None) -> None:
        """Until each of ``names`` started is ready or failed: one still
        starting at the start timeout fails ('did not start within 30 s')."""
        names = [n for n in names if n in self._servers]
        deadline = time.monotonic() + (self.start_timeout_s if timeout_s is None else timeout_s)
        for i, name in enumerate(names):
            server = self._servers[name]
            if progress is not None and not server.settled.is_set():
                progress(f"starting MCP server {name}", i, len(names))
            while not server.settled.wait(_POLL_S * 5):
                if (cancel is not None and cancel.is_set()) or time.monotonic() > deadline:
                    why = "cancelled while starting" if cancel is not None and cancel.is_set() \
                        else f"did not start within {self.start_timeout_s:.0f} s"
                    self._give_up(server, why)
                    break

    def _give_up(self, server: _Server, why: str) -> None:
        with self._lock:
            if server.state != "starting":
                return
            server.state, server.why = "failed", why
        server.settled.set()
        task, loop = server.task, self._loop
        if task is not None and loop is not None:
            loop.call_soon_threadsafe(task.cancel)

    # -- the loop's side -----------------------------------------------------------------
    def _submit(self, coro: Any) -> Any:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever,
                                                name="mlxchat-tools", daemon=True)
                self._thread.start()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def _errlog(self, server: _Server, stack: AsyncExitStack) -> TextIO:
        folder = paths.ensure_private_dir(self._log_dir or paths.tool_logs_dir())
        server.log_path = folder / f"{server.config.name}.log"
        try:
            if server.log_path.stat().st_size > LOG_KEEP_BYTES:
                server.log_path.unlink()
        except OSError:
            pass
        handle = stack.enter_context(open(server.log_path, "a", encoding="utf-8"))
        os.chmod(server.log_path, 0o600)
        handle.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {server.config.describe()}\n")
        handle.flush()
        return handle

    async def _transport(self, server: _Server, stack: AsyncExitStack) -> Any:
        config = server.config
        if config.url:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers=dict(config.headers), timeout=httpx2.Timeout(30.0, read=300.0)))
            return streamable_http_client(config.url, http_client=http)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        env = {k: os.environ[k] for k in BASE_ENV if k in os.environ} | dict(config.env)
        names = ",".join(sorted(env))
        args = ["-I", "-S", str(LAUNCHER), str(os.getpid()), names, str(MAX_MESSAGE_BYTES),
                "--", config.command or "", *config.args]
        params = StdioServerParameters(command=sys.executable, args=args, env=env,
                                       cwd=config.cwd)
        return stdio_client(params, errlog=self._errlog(server, stack))

    async def _serve(self, server: _Server) -> None:
        from mcp import Client
        from mcp_types import Implementation

        server.task = asyncio.current_task()
        server.stopping = asyncio.Event()
        started = time.monotonic()
        try:
            async with AsyncExitStack() as stack:
                transport = await self._transport(server, stack)
                client = await stack.enter_async_context(Client(
                    transport, client_info=Implementation(name="mlxchat", version=__version__)))
                tools = await self._list(client, server.config.name)
                with self._lock:
                    if server.state == "starting":
                        server.client, server.tools, server.state = client, tools, "ready"
                        server.start_s = time.monotonic() - started
                        self.changes += 1
                server.settled.set()
                import jsonschema  # noqa: F401 - the first call checks arguments with it
                await server.stopping.wait()
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - any failure of a server is its state
            why = _one_line(exc) or "it exited"
            if server.log_path is not None and (line := server.last_log_line()):
                why = f"{why} (its stderr: {line})"
            log.info("MCP server %s failed: %s", server.config.name, why, exc_info=exc)
            with self._lock:
                if server.state in ("starting", "ready"):
                    self.changes += server.state == "ready"
                    server.state, server.why = "failed", why
        finally:
            server.settled.set()

    @staticmethod
    async def _list(client: Any, name: str) -> list[ToolInfo]:
        tools: list[ToolInfo] = []
        cursor = None
        for _ in range(_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools += [_tool_info(name, t) for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    # -- calling -------------------------------------------------------------------------
    def call(self, server_name: str, tool: str, arguments: dict[str, Any], *,
             timeout_s: float, cancel: threading.Event | None = None) -> CallOutcome:
        """Run one tool and wait for its result, at most ``timeout_s`` (or until
        ``cancel`` is set). Never raises: a failure is an outcome saying why."""
        started = time.monotonic()
        server = self._servers.get(server_name)
        if server is None or server.state != "ready":
            return outcome.failed(f"the MCP server {server_name} is not running")
        future = self._submit(server.client.call_tool(tool, arguments,
                                                      read_timeout_seconds=timeout_s + 1))
        while True:
            try:
                result = future.result(timeout=_POLL_S)
                return outcome.from_result(result, duration_s=time.monotonic() - started)
            except TimeoutError:
                spent = time.monotonic() - started
                if cancel is not None and cancel.is_set():
                    future.cancel()
                    return outcome.failed("cancelled by the user", duration_s=spent)
                if spent > timeout_s:
                    future.cancel()
                    return outcome.failed(f"no result within {timeout_s:g} s (tool_timeout)",
                                          duration_s=spent)
            except Exception as exc:  # noqa: BLE001 - the server's failure is the call's outcome
                return outcome.failed(self._call_failed(server, exc),
                                      duration_s=time.monotonic() - started)

    def _call_failed(self, server: _Server, exc: BaseException) -> str:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
            line = server.last_log_line()
            why = "the server exited" + (f" (its stderr: {line})" if line else "")
            with self._lock:
                if server.state == "ready":
                    server.state, server.why = "exited", why
                    self.changes += 1
            if server.stopping is not None and self._loop is not None:
                self._loop.call_soon_threadsafe(server.stopping.set)
            return why
        if isinstance(exc, MCPError):
            return f"the server refused the call: {_one_line(exc)}"
        return f"the call failed: {_one_line(exc) or type(exc).__name__}"

    # -- the end -------------------------------------------------------------------------
    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Stop every server and the loop, within ``timeout_s``; a server that
        does not stop by then dies with the loop's thread."""
        with self._lock:
            loop, thread, servers = self._loop, self._thread, list(self._servers.values())
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def stop_all() -> None:
            for server in servers:
                if server.stopping is not None:
                    server.stopping.set()
                elif server.task is not None:
                    server.task.cancel()
            tasks = [s.task for s in servers if s.task is not None]
            if tasks:
                await asyncio.wait(tasks, timeout=max(0.1, timeout_s - 0.5))
        try:
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(timeout=timeout_s)
        except Exception:  # noqa: BLE001 - a stuck server must not hold the quit
            log.warning("MCP servers did not stop within %.0f s", timeout_s)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=1.0)
        for server in servers:
            if server.state in ("starting", "ready"):
                server.state = "not started"


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _one_line(exc.exceptions[0])
    return " ".join(str(exc).split())[:300]
