"""The tools the servers offer, which of them a session uses, and how the
model sees them: OpenAI-style function definitions, as every family's chat
template takes ``tools``, in canonical JSON (the token ledger's key holds it).

A session's choice is one setting, a comma-separated list of selectors:
``*`` (every server), ``SERVER``, ``SERVER.TOOL``, and the same with ``-``
in front to leave one out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlxchat.tools.errors import ToolsError

_FUNCTION_NAME = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64


@dataclass(frozen=True)
class ToolInfo:
    """One tool as its server lists it."""

    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    title: str | None = None
    read_only: bool | None = None
    """The server's hints (claims it makes, never verified)."""
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None

    @property
    def qualified(self) -> str:
        return f"{self.server}.{self.name}"

    def hints(self) -> list[str]:
        """The server's annotations in words; read-only and destructive are
        what a consent dialog shows, labelled as the server's claims."""
        out = []
        if self.read_only:
            out.append("read-only")
        elif self.destructive is not False:
            out.append("may change or delete things" if self.destructive else "may change things")
        if self.idempotent:
            out.append("idempotent")
        if self.open_world:
            out.append("reaches outside this machine")
        return out


# -- a session's choice ------------------------------------------------------------------

def selectors(choice: str | None) -> list[str]:
    return [s.strip() for s in (choice or "").split(",") if s.strip()]


def _matches(selector: str, tool: ToolInfo) -> bool:
    return selector in ("*", tool.server, tool.qualified)


def chosen(choice: str | None, tool: ToolInfo) -> bool:
    """Whether the session's ``choice`` includes ``tool``: a selector names
    it (or its server, or every server) and no '-' selector as wide or
    narrower leaves it out."""
    sel = selectors(choice)
    positive = [s for s in sel if not s.startswith("-") and _matches(s, tool)]
    negative = [s[1:] for s in sel if s.startswith("-") and _matches(s[1:], tool)]
    if not positive:
        return False
    rank = {"*": 0, tool.server: 1, tool.qualified: 2}
    return max(rank[s] for s in positive) > max((rank[s] for s in negative), default=-1)


def servers_of(choice: str | None, configured: Iterable[str]) -> list[str]:
    """The configured servers a choice may use tools of (what to start)."""
    sel = [s for s in selectors(choice) if not s.startswith("-")]
    names = sorted(configured)
    if "*" in sel:
        left_out = {s[1:] for s in selectors(choice) if s.startswith("-") and "." not in s}
        return [n for n in names if n not in left_out]
    wanted = {s.split(".", 1)[0] for s in sel}
    return [n for n in names if n in wanted]


def _check_target(target: str, configured: Sequence[str]) -> None:
    server = target.split(".", 1)[0]
    if target != "*" and server not in configured:
        known = ", ".join(configured) or "none"
        raise ToolsError(f"No MCP server named {server!r} (configured: {known}).")


def choice_problem(choice: str | None, configured: Sequence[str]) -> str | None:
    """Why ``choice`` names a server that is not configured (one line), or None."""
    try:
        for selector in selectors(choice):
            _check_target(selector.removeprefix("-"), configured)
    except ToolsError as exc:
        return str(exc)
    return None


def turned_on(choice: str | None, target: str = "*", *,
              configured: Sequence[str] = ()) -> str | None:
    """``choice`` with ``target`` ('*', SERVER or SERVER.TOOL) included."""
    _check_target(target, configured)
    keep = [s for s in selectors(choice)
            if s not in (target, "-" + target) and not (target == "*" and s.startswith("-"))
            and not (s.startswith("-") and s[1:].startswith(target + "."))]
    return ",".join([*keep, target]) or None


def turned_off(choice: str | None, target: str = "*", *,
               configured: Sequence[str] = ()) -> str | None:
    """``choice`` with ``target`` left out ('*': no tools at all)."""
    if target == "*":
        return None
    _check_target(target, configured)
    keep = [s for s in selectors(choice) if s != target and not s.startswith(target + ".")
            and s != "-" + target]
    covered = any(s in ("*", target.split(".", 1)[0]) for s in keep if not s.startswith("-"))
    if covered:
        keep.append("-" + target)
    return ",".join(keep) or None


# -- what the model sees -----------------------------------------------------------------

def _function_name(text: str) -> str:
    return _FUNCTION_NAME.sub("_", text)[:MAX_NAME] or "tool"


def model_names(tools: Sequence[ToolInfo]) -> dict[str, ToolInfo]:
    """Each tool under the name the model calls it by: its own, or
    ``SERVER__TOOL`` where two servers offer one of the same name."""
    count: dict[str, int] = {}
    for tool in tools:
        count[_function_name(tool.name)] = count.get(_function_name(tool.name), 0) + 1
    out: dict[str, ToolInfo] = {}
    for tool in sorted(tools, key=lambda t: t.qualified):
        name = _function_name(tool.name)
        if count[name] > 1:
            name = _function_name(f"{tool.server}__{tool.name}")
        out[name] = tool
    return out


def definition(name: str, tool: ToolInfo) -> dict[str, Any]:
    schema = tool.input_schema or {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": name, "description": tool.description,
                                             "parameters": schema}}


def definitions_json(named: dict[str, ToolInfo]) -> str | None:
    """The definitions the template renders, canonical (sorted keys, by name)."""
    if not named:
        return None
    return json.dumps([definition(n, named[n]) for n in sorted(named)], sort_keys=True,
                      ensure_ascii=False)


def argument_problem(tool: ToolInfo, arguments: Any) -> str | None:
    """Why ``arguments`` do not fit the tool's input schema (one line), or None."""
    if not isinstance(arguments, dict):
        return "the arguments are not a JSON object"
    if not tool.input_schema:
        return None
    import jsonschema  # a dependency of the MCP SDK; loaded only when a tool is called

    try:
        validator = jsonschema.validators.validator_for(tool.input_schema)
        error = jsonschema.exceptions.best_match(
            validator(tool.input_schema).iter_errors(arguments))
    except jsonschema.exceptions.SchemaError:
        return None  # the server's own schema is broken: the server decides
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"
