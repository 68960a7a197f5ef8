"""A Responses request's fields (``POST /v1/responses``), checked: what the
reply should look like and how it is kept. Its ``input`` is read by
``items``, its ``tools`` by ``tools``; what the route does with each field,
and which it refuses by name, is its table (``fields.RESPONSES``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlxchat.engine.turn.constrained import OutputFormat
from mlxchat.server.core.errors import bad_field
from mlxchat.server.core.requests import MAX_NAME_CHARS, context_policy, model_name, sampling
from mlxchat.server.responses.fields import RESPONSES
from mlxchat.server.responses.tools import Tools, read_tools

EFFORTS: dict[str, dict[str, Any]] = {
    "none": {"thinking": False},
    "minimal": {"thinking": True, "reasoning_effort": "low", "max_reasoning_tokens": 512},
    "low": {"thinking": True, "reasoning_effort": "low", "max_reasoning_tokens": 2048},
    "medium": {"thinking": True, "reasoning_effort": "medium", "max_reasoning_tokens": 8192},
    "high": {"thinking": True, "reasoning_effort": "high", "max_reasoning_tokens": 24576},
    "xhigh": {"thinking": True, "reasoning_effort": "high", "max_reasoning_tokens": 32768},
}
"""``reasoning.effort``: thinking on or off, the effort for templates that
take one (gpt-oss), and the reasoning's budget (ignored by models that do not
reason). Seam: the shared effort table for every route (issue 45 item 1) takes
this over once it is in server/core."""
SUMMARIES = ("auto", "concise", "detailed")
SESSION_PREFIX = "prompt_cache_key "
"""A conversation keyed by ``prompt_cache_key`` is the session titled so."""
MAX_METADATA = 16


@dataclass
class ResponsesRequest:
    model: str
    stream: bool
    store: bool
    previous_id: str | None
    instructions: str | None
    tools: Tools
    settings: dict[str, Any]
    """Generation settings (sampling, max tokens, reasoning)."""
    text_format: OutputFormat | None
    summary: bool
    """The reasoning goes out as the item's summary (else as its content)."""
    sealed: bool
    """Reasoning items carry ``encrypted_content`` (asked in ``include``)."""
    one_call: bool
    """``parallel_tool_calls`` false: a reply makes one call at most."""
    session: str | None
    """The session an ``X-Session`` header or ``prompt_cache_key`` names."""
    echo: dict[str, Any] = field(default_factory=dict)
    """Request fields the response object repeats."""


def _flag(data: dict[str, Any], name: str, default: bool) -> bool:
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_field(name, f"'{name}' must be true or false.")
    return value


def _string(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise bad_field(name, f"'{name}' must be a string.")
    return value


def _object(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_field(name, f"'{name}' must be an object.")
    return value


def _reasoning(data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``reasoning``: its effort as settings, and whether a summary is asked."""
    raw = _object(data, "reasoning")
    effort = raw.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise bad_field("reasoning.effort", "'reasoning.effort' must be one of "
                        + ", ".join(EFFORTS) + ".")
    summary = raw.get("summary", raw.get("generate_summary"))
    if summary is not None and summary not in SUMMARIES:
        raise bad_field("reasoning.summary", "'reasoning.summary' must be one of "
                        + ", ".join(SUMMARIES) + ".")
    return dict(EFFORTS[effort]) if effort else {}, summary is not None


def text_format(data: dict[str, Any]) -> OutputFormat | None:
    """``text.format``: text, json_object, or json_schema (its schema held by
    the same grammar as the chat API's ``response_format``)."""
    given = _object(data, "text").get("format")
    if given is None:
        return None
    kind = given.get("type") if isinstance(given, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat.any_object()
    if kind != "json_schema" or not isinstance(given.get("schema"), dict):
        raise bad_field("text.format", "'text.format' must be {\"type\": \"text\"}, "
                        "{\"type\": \"json_object\"} or {\"type\": \"json_schema\", "
                        "\"name\": ..., \"schema\": {...}}.")
    name = given.get("name")
    return OutputFormat(given["schema"], name if isinstance(name, str) else "")


def _metadata(data: dict[str, Any]) -> dict[str, str]:
    raw = _object(data, "metadata")
    if len(raw) > MAX_METADATA or not all(isinstance(k, str) and isinstance(v, str)
                                          for k, v in raw.items()):
        raise bad_field("metadata", f"'metadata' holds at most {MAX_METADATA} string "
                        "keys and values.")
    return raw


def _session(data: dict[str, Any], header: str | None) -> str | None:
    key = _string(data, "prompt_cache_key")
    name = (header or "").strip() or (SESSION_PREFIX + key.strip() if key and key.strip()
                                      else "")
    if len(name) > MAX_NAME_CHARS:
        raise bad_field("X-Session" if header else "prompt_cache_key", "A session key may "
                        f"be at most {MAX_NAME_CHARS - len(SESSION_PREFIX)} characters.")
    return name or None


def read_request(data: dict[str, Any], header_session: str | None, *,
                 window: int | None = None) -> ResponsesRequest:
    model = model_name(data)
    RESPONSES.check(data)
    include = data.get("include") or []
    if not isinstance(include, list) or not all(isinstance(i, str) for i in include):
        raise bad_field("include", "'include' must be a list of strings.")
    effort, summary = _reasoning(data)
    settings = {**sampling({k: data.get(k) for k in ("temperature", "top_p",
                                                         "max_output_tokens")},
                           max_names=("max_output_tokens",), window=window), **effort,
                **context_policy(data)}
    previous = _string(data, "previous_response_id")
    fmt = text_format(data)
    tools = read_tools(data)
    echo = {"instructions": _string(data, "instructions"), "metadata": _metadata(data),
            "max_output_tokens": data.get("max_output_tokens"),
            "parallel_tool_calls": _flag(data, "parallel_tool_calls", True),
            "previous_response_id": previous, "temperature": data.get("temperature"),
            "top_p": data.get("top_p"), "tool_choice": data.get("tool_choice") or "auto",
            "tools": data.get("tools") or [], "truncation": "disabled",
            "reasoning": {"effort": _object(data, "reasoning").get("effort"),
                          "summary": _object(data, "reasoning").get("summary")},
            "text": {"format": _object(data, "text").get("format") or {"type": "text"}}}
    return ResponsesRequest(
        model, _flag(data, "stream", False), _flag(data, "store", True), previous,
        echo["instructions"], tools, settings, fmt, summary,
        "reasoning.encrypted_content" in include, not echo["parallel_tool_calls"],
        _session(data, header_session), echo)
