"""OpenAI's chat and completion requests read into what the service runs:
every field checked, each problem one 400 naming the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlxchat.server.core.api_turns import ApiRequest
from mlxchat.server.core.errors import bad_field
from mlxchat.server.core.requests import (
    ChatRequest,
    _messages,
    model_name,
    sampling,
    session_name,
    stop_strings,
    tool_definitions,
    whole_number,
)


@dataclass
class OpenAiCommon:
    """What OpenAI's chat and completion requests share."""

    model: str
    stream: bool
    include_usage: bool


def openai_common(data: dict[str, Any]) -> OpenAiCommon:
    """``model``, ``n`` (1 only), ``stream`` and ``stream_options``, checked."""
    model = model_name(data)
    n = whole_number(data, "n", 1)
    if n not in (None, 1):
        raise bad_field("n", "Only one choice per request (n = 1) is supported.")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_field("stream", "'stream' must be true or false.")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad_field("stream_options", "'stream_options' must be an object.")
    return OpenAiCommon(model, stream, bool(options.get("include_usage")))


def openai_chat(data: dict[str, Any], header_session: str | None, *,
                allow_image_urls: bool = False, window: int | None = None) -> ChatRequest:
    common = openai_common(data)
    system, messages = _messages(data, allow_urls=allow_image_urls)
    settings = sampling(data, max_names=("max_tokens", "max_completion_tokens"),
                        window=window)
    tools = tool_definitions(data.get("tools"), data.get("tool_choice"))
    turn = ApiRequest(system, messages, settings, session_name(data, header_session), tools)
    return ChatRequest(common.model, turn, common.stream, stop_strings(data.get("stop")),
                       common.include_usage)
