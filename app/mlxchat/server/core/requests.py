"""Reading a chat request's body (OpenAI's or Ollama's) into an ``ApiRequest``:
every field checked, each problem one 400 naming the field."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

from mlxchat.chat import CalledTool
from mlxchat.generation import CONTEXT_POLICIES
from mlxchat.server.core import images
from mlxchat.server.core.api_turns import ApiRequest, IncomingMessage
from mlxchat.server.core.errors import ApiError, bad_field, missing_field
from mlxchat.server.core.images import ImageBlob
from mlxchat.server.core.tool_calls import calls_signature

ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class ChatRequest:
    """A chat request: the conversation and what the reply should look like."""

    model: str
    turn: ApiRequest
    stream: bool
    stop: list[str] = field(default_factory=list)
    include_usage: bool = False
    max_calls: int | None = None
    """Tool calls a reply may make (1: ``parallel_tool_calls`` false); None: any."""


MAX_MESSAGES = 2048
"""Messages one request may carry (OpenAI's own limit): more would be rendered
and tokenized on the engine's lane before any could be refused."""
MAX_TOOLS = 128
"""Tools one request may define (OpenAI's own limit)."""
MAX_NAME_CHARS = 256
"""A session named by ``user`` or ``X-Session``: an id or a title."""

MAX_DEPTH = 64
"""Nesting a body may have (a tool's JSON schema needs a dozen levels): deeper
data would only be walked recursively later (the template, the tools' JSON)."""


def too_deep(data: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and objects nest more than ``limit`` levels (walked level
    by level, never recursively)."""
    level = [data]
    for _ in range(limit):
        level = [v for c in level for v in (c.values() if isinstance(c, dict) else c)
                 if isinstance(v, (dict, list))]
        if not level:
            return False
    return True


def _nested_too_deep() -> ApiError:
    return ApiError(400, f"The body's JSON is nested more than {MAX_DEPTH} levels deep.",
                    code="invalid_json")


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except RecursionError:  # the parser's own bound, far past ours
        raise _nested_too_deep() from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"The body is not valid JSON: {exc}.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The body must be a JSON object.", code="invalid_json")
    if too_deep(data):
        raise _nested_too_deep()
    return data


def _content(content: Any, param: str, *, allow_urls: bool = False
             ) -> tuple[str, tuple[ImageBlob, ...]]:
    """A message's content: a string, null, or a list of text and image parts."""
    if content is None:
        return "", ()
    if isinstance(content, str):
        return content, ()
    if isinstance(content, list):
        parts, blobs = [], []
        for i, part in enumerate(content):
            where = f"{param}[{i}]"
            if isinstance(part, dict) and part.get("type") == "image_url":
                url = part.get("image_url")
                blobs.append(images.from_url(url.get("url") if isinstance(url, dict) else url,
                                             where, allow_urls=allow_urls))
                continue
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise bad_field(where, "Only text and image_url content parts are supported.")
            parts.append(part["text"])
        return "".join(parts), tuple(blobs)
    raise bad_field(param, "A message's content must be a string or a list of text parts.")


def _call_arguments(args: Any) -> Any:
    """Arguments as JSON data: OpenAI sends them as a JSON string, Ollama as an object."""
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except (ValueError, RecursionError):
            return args
        return args if too_deep([parsed]) else parsed
    return {} if args is None else args


def tool_calls(calls: Any, param: str) -> tuple[CalledTool, ...]:
    """A message's ``tool_calls`` (OpenAI's or Ollama's shape), checked."""
    if not calls:
        return ()
    if not isinstance(calls, list):
        raise bad_field(param, "'tool_calls' must be a list.")
    out = []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad_field(f"{param}[{i}]", "A tool call needs function.name.")
        call_id = call.get("id")
        out.append(CalledTool(fn["name"], _call_arguments(fn.get("arguments", "{}")),
                              call_id if isinstance(call_id, str) else ""))
    return tuple(out)


def tool_signature(calls: Any, param: str) -> str:
    """Tool calls as the client sees them, canonical (what the index hashes)."""
    return calls_signature(tool_calls(calls, param))


def tool_definitions(tools: Any, choice: Any) -> str | None:
    """OpenAI's ``tools`` as canonical JSON for the template (None: no tools,
    or ``choice`` "none"; ``server.tool_choice`` reads the other choices)."""
    if not tools or choice == "none":
        return None
    if not isinstance(tools, list):
        raise bad_field("tools", "'tools' must be a list.")
    if len(tools) > MAX_TOOLS:
        raise bad_field("tools", f"'tools' may hold at most {MAX_TOOLS} tools; got {len(tools):,}.")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" \
                or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad_field(f"tools[{i}]", "A tool needs type 'function' and function.name.")
    return json.dumps(tools, sort_keys=True, ensure_ascii=False)


def _ollama_images(m: dict[str, Any], where: str) -> tuple[ImageBlob, ...]:
    raw = m.get("images")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise bad_field(f"{where}.images", "'images' must be a list of base64 strings.")
    return tuple(images.from_base64(b, f"{where}.images[{n}]") for n, b in enumerate(raw))


def message_list(data: dict[str, Any]) -> list[Any]:
    """The body's ``messages``: a list of 1 to ``MAX_MESSAGES`` items."""
    if "messages" not in data:
        raise missing_field("messages")
    raw = data["messages"]
    if not isinstance(raw, list) or not raw:
        raise bad_field("messages", "'messages' must be a non-empty list.")
    if len(raw) > MAX_MESSAGES:
        raise bad_field("messages", f"'messages' may hold at most {MAX_MESSAGES:,} messages; "
                        f"got {len(raw):,}.")
    return raw


def message_items(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each of the body's ``messages`` with where it is (``messages[i]``), each an
    object (else a 400 naming it)."""
    for i, m in enumerate(message_list(data)):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad_field(where, "Each message must be an object.")
        yield where, m


def _messages(data: dict[str, Any], *, allow_urls: bool = False, ollama: bool = False
              ) -> tuple[str | None, list[IncomingMessage]]:
    system: list[str] = []
    out: list[IncomingMessage] = []
    called: dict[str, str] = {}
    """The last reply's calls: id -> tool name."""
    for where, m in message_items(data):
        if "role" not in m:
            raise missing_field(f"{where}.role")
        role = m["role"]
        if role not in ROLES:
            raise bad_field(f"{where}.role", f"Role {role!r} is not supported; use one of "
                            + ", ".join(ROLES) + ".")
        content, blobs = _content(m.get("content"), f"{where}.content", allow_urls=allow_urls)
        if ollama:
            blobs += _ollama_images(m, where)
        if blobs and role != "user":
            raise bad_field(where, "Only the user's messages may show images.")
        if role in ("system", "developer"):
            if out:  # placed by ``system_messages``' rule
                out.append(IncomingMessage("system", content))
            else:
                system.append(content)
            continue
        if role == "tool":
            out.append(_tool_result(m, content, where, called))
            continue
        calls = tool_calls(m.get("tool_calls"), f"{where}.tool_calls") \
            if role == "assistant" else ()
        if calls:
            called = {c.id: c.name for c in calls}
            called[""] = calls[-1].name  # a result that names no call answers the last
        if role == "user" and "content" not in m:
            raise missing_field(f"{where}.content")
        # An image URL's digest is known once it is fetched (``image_fetch``).
        signature = calls_signature(calls) + images.signature(blobs)
        out.append(IncomingMessage(role, content, signature, calls, images=blobs))
    if not out or out[-1].role not in ("user", "tool", "system", "assistant") \
            or out[-1].calls:
        raise bad_field("messages", "The last message must be the user's, a tool result, "
                        "a system message, or the text of a reply for the model to continue.")
    return ("\n\n".join(system) if system else None), out


def _tool_result(m: dict[str, Any], content: str, where: str,
                 called: dict[str, str]) -> IncomingMessage:
    """A tool result: the call it answers (OpenAI's ``tool_call_id``) and its
    tool's name (given as Ollama's ``tool_name`` or ``name``, else the call's)."""
    call_id = m.get("tool_call_id")
    if call_id is not None and not isinstance(call_id, str):
        raise bad_field(f"{where}.tool_call_id", "'tool_call_id' must be a string.")
    name = m.get("tool_name", m.get("name"))
    if name is not None and not isinstance(name, str):
        raise bad_field(f"{where}.tool_name", "A tool result's tool name must be a string.")
    name = name or called.get(call_id or "") or None
    signature = json.dumps([call_id or "", name or ""], ensure_ascii=False)
    return IncomingMessage("tool", content, signature, call_id=call_id, tool_name=name)


def number(data: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not low <= value <= high:
        raise bad_field(name, f"'{name}' must be a number from {low:g} to {high:g}.")
    return float(value)


def whole_number(data: dict[str, Any], name: str, low: int) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low or value >= 2**63:
        raise bad_field(name, f"'{name}' must be a whole number >= {low}.")
    return value


def stop_strings(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > 4 \
            or not all(isinstance(s, str) and s for s in stops):
        raise bad_field("stop", "'stop' must be a string or a list of up to 4 strings.")
    return stops


def too_many_tokens(name: str, value: int, window: int) -> ApiError:
    """OpenAI's refusal of a ``max_tokens`` past the whole context window (one
    the window holds but the prompt leaves less room for is capped, not refused)."""
    return bad_field(name, f"{name} is too large: {value}. This model's context window "
                     f"holds {window} tokens, the prompt's and the completion's together, "
                     f"whereas you provided {value}.")


def sampling(data: dict[str, Any], *, max_names: tuple[str, ...],
             window: int | None = None) -> dict[str, Any]:
    """Generation settings the request gives (temperature, top_p, top_k, max
    tokens, seed); a max tokens past ``window`` (the context window) is refused,
    as OpenAI does."""
    settings: dict[str, Any] = {}
    temperature = number(data, "temperature", 0.0, 2.0)
    if temperature is not None:
        settings["temperature"] = temperature
    top_p = number(data, "top_p", 0.0, 1.0)
    if top_p is not None:
        if top_p == 0:
            raise bad_field("top_p", "'top_p' must be above 0.")
        settings["top_p"] = top_p
    top_k = whole_number(data, "top_k", 0)
    if top_k is not None:
        settings["top_k"] = top_k
    for name in max_names:
        limit = whole_number(data, name, 1)
        if limit is not None:
            if window is not None and limit > window:
                raise too_many_tokens(name, limit, window)
            settings["max_tokens"] = limit
    seed = whole_number(data, "seed", 0)
    if seed is not None:
        settings["seed"] = seed
    return settings


def context_policy(data: dict[str, Any]) -> dict[str, Any]:
    """The request's ``context_policy`` (mlxchat's own field, every protocol):
    what a history past the window gets instead of a 400 (``serve
    --context-policy`` sets the default)."""
    value = data.get("context_policy")
    if value is None:
        return {}
    if value not in CONTEXT_POLICIES:
        raise bad_field("context_policy", "'context_policy' must be compact, drop_oldest or "
                        "stop.")
    return {"context_policy": value}


def session_name(data: dict[str, Any], header: str | None) -> str | None:
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise bad_field("user", "'user' must be a string.")
    name = (header or user or "").strip()
    if len(name) > MAX_NAME_CHARS:
        raise bad_field("X-Session" if header else "user", "A session is named by its id or "
                        f"title, at most {MAX_NAME_CHARS} characters; got {len(name):,}.")
    return name or None


def model_name(data: dict[str, Any]) -> str:
    """The body's ``model``: present and a string (else a 400 naming it)."""
    model = data.get("model")
    if model is None:
        raise missing_field("model")
    if not isinstance(model, str):
        raise bad_field("model", "'model' must be a string.")
    return model
