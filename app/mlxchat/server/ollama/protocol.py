"""Ollama's chat request read into what the service runs: every field
checked, each problem one 400 naming the field (in Ollama's shape)."""

from __future__ import annotations

from typing import Any

from mlxchat.server.core.api_turns import ApiRequest
from mlxchat.server.core.errors import ApiError, bad_field, missing_field
from mlxchat.server.core.requests import (
    ChatRequest,
    _messages,
    sampling,
    session_name,
    stop_strings,
    tool_definitions,
    whole_number,
)


def unbounded_num_predict(options: dict[str, Any]) -> bool:
    """Ollama's ``num_predict`` -1 (no limit) and -2 (fill the context): both run
    until the model stops or the context window is full."""
    value = options.get("num_predict")
    return isinstance(value, int) and not isinstance(value, bool) and value in (-1, -2)


def _bounded(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without a num_predict of -1 or -2; any other one not a whole
    number from 1 refused, naming the two."""
    if unbounded_num_predict(options):
        return {k: v for k, v in options.items() if k != "num_predict"}
    try:
        whole_number(options, "num_predict", 1)
    except ApiError:
        raise bad_field("num_predict", "'num_predict' must be a whole number >= 1, or -1 "
                        "or -2.") from None
    return options


def ollama_chat(data: dict[str, Any], header_session: str | None, *,
                window: int | None = None) -> ChatRequest:
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise missing_field("model")
    system, messages = _messages(data, ollama=True)
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise bad_field("options", "'options' must be an object.")
    settings = sampling(_bounded(options), max_names=("num_predict",), window=window)
    if unbounded_num_predict(options) and window is not None:
        settings["max_tokens"] = window  # the engine stops where the window is full
    stream = data.get("stream", True)
    if not isinstance(stream, bool):
        raise bad_field("stream", "'stream' must be true or false.")
    tools = tool_definitions(data.get("tools"), None)
    turn = ApiRequest(system, messages, settings, session_name({}, header_session), tools)
    return ChatRequest(model, turn, stream, stop_strings(options.get("stop")))
