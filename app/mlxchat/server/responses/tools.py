"""A Responses request's ``tools`` and ``tool_choice`` as the chat API's: each
``function`` tool as it is; a ``namespace``'s functions flattened beside them
(a call of one goes back out with its ``namespace``); built-in tools this
server does not run (``web_search``, ``file_search``, ``custom`` tools, ...)
left out, said once in the server's log, never refused."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from mlxchat.engine.turn.tool_grammar import ToolChoice
from mlxchat.server.core.errors import bad_field
from mlxchat.server.core.requests import MAX_TOOLS, tool_definitions
from mlxchat.server.core.tool_choice import openai_choice

log = logging.getLogger(__name__)

_said: set[str] = set()
_said_lock = threading.Lock()


def _say_left_out(kind: str) -> None:
    """One log line per kind of tool left out, for the life of the process."""
    with _said_lock:
        if kind in _said:
            return
        _said.add(kind)
    log.warning("responses: tools of type %r are not run by this server; left out of the "
                "requests that give them", kind)


@dataclass
class Tools:
    """What the template is given, and how a call's name goes back out."""

    definitions: str | None
    """Canonical JSON for the template (chat-shaped), or None."""
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)
    """A flattened function's name -> (its namespace, its name there)."""
    choice: ToolChoice = field(default_factory=ToolChoice)

    def flat_name(self, name: str, namespace: str | None) -> str:
        """The name a call the client sends back has here."""
        if namespace is None:
            return name
        for flat, (space, inner) in self.namespaces.items():
            if (space, inner) == (namespace, name):
                return flat
        return name

    def call_name(self, flat: str) -> tuple[str, str | None]:
        """A call's (name, namespace) as the client knows the tool."""
        space, inner = self.namespaces.get(flat, (None, flat))
        return inner, space


def _function(tool: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise bad_field(where, "A function tool needs its 'name'.")
    params = tool.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise bad_field(f"{where}.parameters", "'parameters' must be a JSON schema object.")
    function: dict[str, Any] = {"name": tool["name"]}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    function["parameters"] = params if params is not None else {"type": "object",
                                                                 "properties": {}}
    return {"type": "function", "function": function}


def _flattened(raw: list[Any]) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]]]:
    out: list[dict[str, Any]] = []
    spaces: dict[str, tuple[str, str]] = {}
    for i, tool in enumerate(raw):
        where = f"tools[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(kind, str):
            raise bad_field(where, "Each tool must be an object with a 'type'.")
        if kind == "function":
            out.append(_function(tool, where))
        elif kind == "namespace":
            inner = tool.get("tools")
            if not isinstance(tool.get("name"), str) or not isinstance(inner, list):
                raise bad_field(where, "A namespace tool needs its 'name' and a 'tools' list.")
            for j, member in enumerate(inner):
                at = f"{where}.tools[{j}]"
                if not isinstance(member, dict) or member.get("type") != "function":
                    _say_left_out(f"{member.get('type') if isinstance(member, dict) else '?'}"
                                  " (in a namespace)")
                    continue
                out.append(_function(member, at))
                spaces[member["name"]] = (tool["name"], member["name"])
        else:
            _say_left_out(kind)
    names = [t["function"]["name"] for t in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise bad_field("tools", f"Two tools are named {twice[0]!r} (namespaces are "
                        "flattened here: their functions' names must differ from every other's).")
    return out, spaces


def _choice(raw: Any) -> Any:
    """Responses' ``tool_choice`` in the chat API's shape."""
    if raw is None or isinstance(raw, str):
        return raw
    if isinstance(raw, dict) and raw.get("type") == "function" \
            and isinstance(raw.get("name"), str):
        return {"type": "function", "function": {"name": raw["name"]}}
    raise bad_field("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or "
                    "{\"type\": \"function\", \"name\": ...} (built-in tools, allowed_tools "
                    "and custom tools are not supported).")


def read_tools(data: dict[str, Any]) -> Tools:
    raw = data.get("tools")
    if raw is not None and not isinstance(raw, list):
        raise bad_field("tools", "'tools' must be a list.")
    flat, spaces = _flattened(raw or [])
    if len(flat) > MAX_TOOLS:
        raise bad_field("tools", f"'tools' may hold at most {MAX_TOOLS} functions; got "
                        f"{len(flat):,}.")
    choice = _choice(data.get("tool_choice"))
    parsed = openai_choice({"tool_choice": choice})
    if parsed.forced and not flat:
        raise bad_field("tool_choice", "'tool_choice' asks for a tool call but no function "
                        "tool is given.")
    return Tools(tool_definitions(flat, choice), spaces, parsed)
