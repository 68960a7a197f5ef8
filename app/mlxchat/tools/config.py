"""The MCP servers a user configured, in the format they already have:
``{"mcpServers": {NAME: {"command", "args", "env", "cwd"} | {"url", "headers"}}}``
in ``mcp.json`` (Claude Desktop, Cursor and LM Studio write the same), with
``${VAR}`` and ``${VAR:-default}`` expanded when the file is read.

A server whose entry cannot be used is kept with the one line why, so
``/tools`` can say it; the others still work.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlxchat import paths
from mlxchat.files import write_private_text
from mlxchat.tools.errors import ToolsError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
"""A server's name: no dots (``SERVER.TOOL`` names one tool) and no spaces."""
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
BASE_ENV = ("PATH", "HOME", "TERM", "LANG")
"""What a stdio server gets of this process's environment besides what its entry names."""
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class ServerConfig:
    """One server as its entry says, variables expanded."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    """Variables the server gets (names and values), beside ``BASE_ENV``."""
    cwd: str | None = None
    url: str | None = None
    """A streamable HTTP server's endpoint (else a stdio command)."""
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def kind(self) -> str:
        return "http" if self.url else "stdio"

    def fingerprint(self) -> str:
        """What runs: the command, its arguments and folder, or the URL (never
        the values of its variables or headers, which may be secrets). An
        'always' grant holds for this fingerprint only."""
        what = [self.kind, self.url or "", self.command or "", *self.args, self.cwd or ""]
        return hashlib.sha256("\0".join(what).encode("utf-8", "surrogatepass")).hexdigest()[:16]

    def describe(self) -> str:
        """The command line or the URL, for /tools."""
        if self.url:
            return self.url
        return " ".join([self.command or "", *self.args]).strip()


@dataclass
class ToolsConfig:
    """Every server of ``mcp.json``: those usable, and why the others are not."""

    path: Path
    servers: dict[str, ServerConfig] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    """Server name -> the one line why it cannot be used."""
    error: str | None = None
    """Why the file as a whole could not be read (no server is usable then)."""
    stamp: tuple[int, int] | None = None
    """The file's (mtime_ns, size) when it was read (``file_stamp``); None for
    a configuration made in memory, which is never read again."""

    def changed_on_disk(self) -> bool:
        """Whether the file changed since it was read (written by `mlxchat tools
        import` in another shell, or by hand)."""
        return self.stamp is not None and file_stamp(self.path) != self.stamp

    def unusable(self) -> str | None:
        """Why no server of this configuration can be used (one line), or None."""
        if self.error:
            return self.error
        if not self.names:
            return (f"No MCP server is configured: add one to {self.path} or run "
                    "mlxchat tools import FILE.")
        return None

    @property
    def names(self) -> list[str]:
        return sorted({*self.servers, *self.problems})


def file_stamp(path: Path) -> tuple[int, int]:
    """(mtime_ns, size) of ``path``; (0, -1) when it does not exist."""
    try:
        st = path.stat()
    except OSError:
        return (0, -1)
    return (st.st_mtime_ns, st.st_size)


def expand(text: str, environ: Mapping[str, str]) -> str:
    """``${VAR}`` and ``${VAR:-default}`` replaced; a variable that is not set
    and has no default is a ToolsError."""
    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = environ.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise ToolsError(f"${{{name}}} is not set (write ${{{name}:-default}} "
                                 "for a default)")
            return default
        return value
    return _VAR.sub(one, text)


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolsError(f"{what} must be a list of strings")
    return value


def _mapping(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise ToolsError(f"{what} must be an object of strings")
    return value


def check_entry(entry: Any) -> None:
    """A ToolsError (one line) when an entry cannot describe a server."""
    if not isinstance(entry, dict):
        raise ToolsError("the entry must be an object")
    kind = entry.get("type")
    if kind in ("sse", "websocket"):
        raise ToolsError(f"the {kind} transport is not supported (stdio or streamable HTTP)")
    has_url, has_command = "url" in entry or "serverUrl" in entry, "command" in entry
    if has_url == has_command:
        raise ToolsError('give either "command" (a program run over stdio) or "url" '
                         "(streamable HTTP)")
    if has_command and (not isinstance(entry["command"], str) or not entry["command"].strip()):
        raise ToolsError('"command" must be a program name')
    url = entry.get("url", entry.get("serverUrl"))
    if has_url and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise ToolsError('"url" must start with http:// or https://')
    _strings(entry.get("args", []), '"args"')
    _mapping(entry.get("env", {}), '"env"')
    _mapping(entry.get("headers", {}), '"headers"')
    if entry.get("cwd") is not None and not isinstance(entry["cwd"], str):
        raise ToolsError('"cwd" must be a folder')


def server_from(name: str, entry: Any, environ: Mapping[str, str]) -> ServerConfig:
    """One entry read, checked and expanded (ToolsError, one line, otherwise)."""
    if not NAME.match(name):
        raise ToolsError("a server's name is letters, digits, '-' and '_' (no dots or spaces)")
    check_entry(entry)
    env = {k: expand(v, environ) for k, v in entry.get("env", {}).items()}
    if "url" in entry or "serverUrl" in entry:
        headers = {k: expand(v, environ) for k, v in entry.get("headers", {}).items()}
        return ServerConfig(name, url=expand(entry.get("url", entry.get("serverUrl")), environ),
                            headers=tuple(sorted(headers.items())))
    cwd = entry.get("cwd")
    return ServerConfig(name, command=expand(entry["command"], environ),
                        args=tuple(expand(a, environ) for a in entry.get("args", [])),
                        env=tuple(sorted(env.items())),
                        cwd=os.path.expanduser(expand(cwd, environ)) if cwd else None)


def _servers_of(data: Any) -> dict[str, Any]:
    """The servers object of a config file: ``mcpServers`` (Claude Desktop,
    Cursor, LM Studio, mlxchat) or ``servers`` (VS Code)."""
    if not isinstance(data, dict):
        raise ToolsError("the file must hold a JSON object")
    servers = data.get("mcpServers", data.get("servers"))
    if servers is None:
        raise ToolsError('the file has no "mcpServers" object')
    if not isinstance(servers, dict):
        raise ToolsError('"mcpServers" must be an object of servers')
    return servers


def _read_json(path: Path) -> Any:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ToolsError(f"{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ToolsError(f"{path}: over {MAX_CONFIG_BYTES >> 20} MB, not an MCP config")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ToolsError(f"{path}: not valid JSON ({exc})") from None


def load_tools_config(path: Path | None = None, *,
                      environ: Mapping[str, str] | None = None) -> ToolsConfig:
    """The servers of ``mcp.json`` (none when it does not exist)."""
    path = path or paths.mcp_config_file()
    environ = os.environ if environ is None else environ
    config = ToolsConfig(path, stamp=file_stamp(path))
    if not path.exists():
        return config
    try:
        entries = _servers_of(_read_json(path))
    except ToolsError as exc:
        config.error = str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}"
        return config
    for name, entry in entries.items():
        if isinstance(entry, dict) and entry.get("disabled") is True:
            continue
        try:
            config.servers[name] = server_from(name, entry, environ)
        except ToolsError as exc:
            config.problems[name] = str(exc)
    return config


@dataclass
class ImportReport:
    """What ``mlxchat tools import`` did."""

    target: Path
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(name, why) of the servers left out."""
    renamed: list[tuple[str, str]] = field(default_factory=list)
    """(name in the file, name here) where the file's name has other characters."""


def _safe_name(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-_")[:64]
    return safe or "server"


def import_servers(source: Path, *, target: Path | None = None,
                   replace: bool = False) -> ImportReport:
    """Add the servers of a Claude Desktop, Cursor, LM Studio or VS Code file
    to ``mcp.json``, as written (``${VAR}`` kept for the read to expand).
    A name already there is kept unless ``replace``; the file is written once,
    atomically, readable by its owner only."""
    target = target or paths.mcp_config_file()
    entries = _servers_of(_read_json(Path(source).expanduser()))
    data: dict[str, Any] = {"mcpServers": {}}
    if target.exists():
        data = _read_json(target)
        _servers_of(data)
        data.setdefault("mcpServers", data.pop("servers", {}))
    ours: dict[str, Any] = data["mcpServers"]
    report = ImportReport(target)
    for name, entry in entries.items():
        here = name if NAME.match(name) else _safe_name(name)
        if here != name:
            report.renamed.append((name, here))
        try:
            check_entry(entry)
        except ToolsError as exc:
            report.skipped.append((name, str(exc)))
            continue
        if here in ours and ours[here] != entry and not replace:
            report.skipped.append((name, "a server of that name is configured already "
                                         "(--replace takes the file's)"))
            continue
        if here in ours and ours[here] != entry:
            report.replaced.append(here)
        elif here not in ours:
            report.added.append(here)
        ours[here] = {k: v for k, v in entry.items() if k != "type" or v != "stdio"}
    if report.added or report.replaced:
        write_private_text(target, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return report
