"""``tool_choice`` as OpenAI and Anthropic send it, and the grammar a reply
follows: the request's schema (``response_format`` and its kin) when it
gives one, else its tools' (``engine.turn.tool_grammar``: a forced call, or
calls the model opens held to their input schemas). Compiled before the
turn is placed, so what cannot be held is a 400 before any prefill."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.concurrency import run_in_threadpool

from mlxchat.engine.turn.constrained import CompiledFormat, OutputFormat, SchemaError
from mlxchat.engine.turn.tool_grammar import ANY, ToolChoice, compile_tools
from mlxchat.server.core.api_turns import ApiRequest
from mlxchat.server.core.errors import ApiError, bad_field
from mlxchat.server.core.response_format import compiled


def openai_choice(data: dict[str, Any]) -> ToolChoice:
    """OpenAI's ``tool_choice``: "auto", "none", "required", or
    ``{"type": "function", "function": {"name": ...}}``."""
    raw = data.get("tool_choice")
    if raw in (None, "auto", "none"):
        return ToolChoice()
    if raw == "required":
        return ToolChoice(ANY)
    fn = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or raw.get("type") != "function" or not isinstance(fn, dict) \
            or not isinstance(fn.get("name"), str):
        raise bad_field("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or "
                        "{\"type\": \"function\", \"function\": {\"name\": ...}}.")
    return ToolChoice(fn["name"])


def anthropic_choice(data: dict[str, Any]) -> ToolChoice:
    """Anthropic's ``tool_choice``: ``{"type": "auto" | "any" | "none"}`` or
    ``{"type": "tool", "name": ...}``."""
    raw = data.get("tool_choice")
    kind = raw.get("type") if isinstance(raw, dict) else None
    if raw is None or kind in ("auto", "none"):
        return ToolChoice()
    if kind == "any":
        return ToolChoice(ANY)
    if kind == "tool" and isinstance(raw.get("name"), str):
        return ToolChoice(raw["name"])
    raise bad_field("tool_choice", "'tool_choice' must be {\"type\": \"auto\"}, {\"type\": "
                    "\"any\"}, {\"type\": \"none\"} or {\"type\": \"tool\", \"name\": ...}.")


def _forced_settings(turn: ApiRequest) -> ApiRequest:
    """A forced call is the reply's first token: no reasoning before it."""
    if turn.settings.get("thinking"):
        raise bad_field("thinking", "Thinking may not be enabled when tool_choice forces "
                        "a tool call.")
    return replace(turn, settings={**turn.settings, "thinking": False})


async def constrained(tokenizer: Any, turn: ApiRequest, fmt: OutputFormat | None,
                      choice: ToolChoice, *, format_param: str) -> ApiRequest:
    """``turn`` with the grammar its reply follows; an ApiError (400) with the
    compiler's reason when it cannot be held to it."""
    if fmt is not None:
        if choice.forced:
            raise bad_field("tool_choice", f"A reply cannot both follow '{format_param}' "
                            "and call a tool.")
        return replace(turn, output=await compiled(tokenizer, fmt, format_param))
    try:
        output: CompiledFormat | None = await run_in_threadpool(compile_tools, tokenizer,
                                                                turn.tools, choice)
    except SchemaError as exc:
        if not choice.forced:  # calls the model opens stay free, as before
            return turn
        raise ApiError(400, str(exc), param="tool_choice", code="invalid_tool_choice") from None
    turn = replace(turn, output=output)
    return _forced_settings(turn) if choice.forced else turn
