"""OpenAI's chat and completion requests read into what the service runs:
every field checked against its route's table (``fields``), each problem
one 400 naming the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlxchat.engine.turn.reply_options import MAX_TOP_LOGPROBS, ReplyOptions
from mlxchat.generation import REASONING_EFFORTS
from mlxchat.server.core.api_turns import ApiRequest
from mlxchat.server.core.errors import bad_field
from mlxchat.server.core.fields import FieldTable
from mlxchat.server.core.reply_asks import begun_reply, choices, logit_bias, penalties
from mlxchat.server.core.requests import (
    ChatRequest,
    _messages,
    context_policy,
    model_name,
    sampling,
    session_name,
    stop_strings,
    tool_definitions,
    whole_number,
)
from mlxchat.server.openai import fields


@dataclass
class OpenAiCommon:
    """What OpenAI's chat and completion requests share."""

    model: str
    stream: bool
    include_usage: bool
    choices: int = 1
    """``n``: replies sampled from the one prompt."""


def openai_common(data: dict[str, Any], table: FieldTable) -> OpenAiCommon:
    """The route's refused fields, then ``model``, ``n``, ``stream`` and
    ``stream_options``, checked."""
    table.check(data)
    model = model_name(data)
    n = choices(data)
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_field("stream", "'stream' must be true or false.")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad_field("stream_options", "'stream_options' must be an object.")
    return OpenAiCommon(model, stream, bool(options.get("include_usage")), n)


def top_logprobs(data: dict[str, Any], name: str) -> int | None:
    """A number of alternatives per token, 0 to ``MAX_TOP_LOGPROBS`` (None: not given)."""
    value = whole_number(data, name, 0)
    if value is not None and value > MAX_TOP_LOGPROBS:
        raise bad_field(name, f"'{name}' may be at most {MAX_TOP_LOGPROBS}; got {value}.")
    return value


def _chat_logprobs(data: dict[str, Any]) -> int | None:
    """``logprobs`` (true: each token's) and ``top_logprobs`` (its alternatives)."""
    asked = data.get("logprobs")
    if asked is not None and not isinstance(asked, bool):
        raise bad_field("logprobs", "'logprobs' must be true or false.")
    top = top_logprobs(data, "top_logprobs")
    if top is not None and not asked:
        raise bad_field("top_logprobs", "'top_logprobs' needs 'logprobs': true.")
    return (top or 0) if asked else None


def _reasoning_effort(data: dict[str, Any]) -> dict[str, str]:
    value = data.get("reasoning_effort")
    if value is None:
        return {}
    if value not in REASONING_EFFORTS:
        raise bad_field("reasoning_effort", "'reasoning_effort' must be one of "
                        + ", ".join(REASONING_EFFORTS) + " here (templates that take it "
                        "read it; others leave it aside).")
    return {"reasoning_effort": value}


def openai_chat(data: dict[str, Any], header_session: str | None, *,
                allow_image_urls: bool = False, window: int | None = None) -> ChatRequest:
    common = openai_common(data, fields.CHAT)
    system, messages = _messages(data, allow_urls=allow_image_urls)
    messages, prefill = begun_reply(messages)
    settings = sampling(data, max_names=("max_tokens", "max_completion_tokens"),
                        window=window)
    options = ReplyOptions(logit_bias=logit_bias(data), logprobs=_chat_logprobs(data),
                           choices=common.choices, **penalties(data))
    tools = tool_definitions(data.get("tools"), data.get("tool_choice"))
    turn = ApiRequest(system, messages, {**settings, **_reasoning_effort(data), **context_policy(data)},
                      session_name(data, header_session), tools, options=options,
                      prefill=prefill)
    return ChatRequest(common.model, turn, common.stream, stop_strings(data.get("stop")),
                       common.include_usage, max_calls=_max_calls(data))


def _max_calls(data: dict[str, Any]) -> int | None:
    """``parallel_tool_calls`` false: a reply keeps its first tool call only."""
    parallel = data.get("parallel_tool_calls", True)
    if parallel is None:
        return None
    if not isinstance(parallel, bool):
        raise bad_field("parallel_tool_calls", "'parallel_tool_calls' must be true or false.")
    return None if parallel else 1
