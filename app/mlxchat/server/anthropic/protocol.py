"""Anthropic's Messages API request (``POST /v1/messages``) read into the
same ``ChatRequest`` the OpenAI and Ollama endpoints make: ``system`` (a
string or text blocks), ``messages`` of content blocks (text, base64 images,
``tool_use`` in replies, ``tool_result`` in the user's turn), ``tools`` and
``tool_choice``, ``stop_sequences``, ``max_tokens``, the sampling numbers
clients put in the body, ``thinking`` and ``output_config.effort``
(``anthropic.thinking``), system messages among the others (placed by
``core.system_messages``). ``cache_control`` is accepted and left aside:
every conversation's KV is kept whole anyway; so are ``context_management``'s
edits (the ledger keeps each reply's thinking as it was computed) and
``metadata``."""

from __future__ import annotations

import json
from typing import Any

from mlxchat.chat import CalledTool
from mlxchat.server.anthropic.fields import MESSAGES
from mlxchat.server.anthropic.thinking import thinking_settings
from mlxchat.server.core import images
from mlxchat.server.core.api_turns import ApiRequest, IncomingMessage
from mlxchat.server.core.errors import bad_field, missing_field
from mlxchat.server.core.images import ImageBlob
from mlxchat.server.core.reply_asks import begun_reply
from mlxchat.server.core.requests import (
    ChatRequest,
    context_policy,
    message_items,
    model_name,
    sampling,
    session_name,
    tool_definitions,
)
from mlxchat.server.core.system_messages import split_leading
from mlxchat.server.core.tool_calls import calls_signature
from mlxchat.server.core.tool_choice import anthropic_choice

MAX_STOPS = 32
"""Stop sequences one request may give."""


def _text_blocks(content: Any, where: str, *, allow: tuple[str, ...] = ()) -> list[dict]:
    """A content given as a string or a list of blocks, as blocks; each block
    must be an object with a type (``text``, or one of ``allow``)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise bad_field(where, "Content must be a string or a list of content blocks.")
    for i, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in ("text", *allow):
            shown = f"'{kind}'" if isinstance(kind, str) else "a block without a type"
            raise bad_field(f"{where}[{i}]", f"Content blocks of type {shown} are not "
                            "supported here.")
        if kind == "text" and not isinstance(block.get("text"), str):
            raise bad_field(f"{where}[{i}].text", "A text block needs its 'text' string.")
    return content


def _system(data: dict[str, Any]) -> str | None:
    raw = data.get("system")
    if raw is None:
        return None
    texts = [b["text"] for b in _text_blocks(raw, "system")]
    return "\n\n".join(texts) if texts else None


def _image(block: dict[str, Any], where: str) -> ImageBlob:
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        raise bad_field(f"{where}.source", "Only base64 image sources are supported.")
    return images.from_base64(source.get("data"), f"{where}.source.data")


def _result_text(block: dict[str, Any], where: str) -> str:
    """A tool result's content (a string or text blocks); an error said as one."""
    content = block.get("content", "")
    text = "\n\n".join(b["text"] for b in _text_blocks(content, f"{where}.content"))
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise bad_field(f"{where}.is_error", "'is_error' must be true or false.")
    return f"Error: {text}" if is_error else text


def _user(content: Any, where: str, called: dict[str, str]) -> list[IncomingMessage]:
    """The user's turn: its tool results (each a tool message), then its text
    and images (a user message) when it has any."""
    out: list[IncomingMessage] = []
    texts: list[str] = []
    blobs: list[ImageBlob] = []
    blocks = _text_blocks(content, f"{where}.content", allow=("image", "tool_result"))
    for i, block in enumerate(blocks):
        at = f"{where}.content[{i}]"
        if block["type"] == "text":
            texts.append(block["text"])
        elif block["type"] == "image":
            blobs.append(_image(block, at))
        else:
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or call_id not in called:
                raise bad_field(f"{at}.tool_use_id", "A tool_result must answer a tool_use "
                                "of the assistant's message just before it.")
            text = _result_text(block, at)
            signature = json.dumps([call_id, called[call_id]], ensure_ascii=False)
            out.append(IncomingMessage("tool", text, signature, call_id=call_id,
                                       tool_name=called[call_id]))
    if texts or blobs or not out:
        out.append(IncomingMessage("user", "\n\n".join(texts), images.signature(tuple(blobs)),
                                   images=tuple(blobs)))
    return out


def _assistant(content: Any, where: str) -> IncomingMessage:
    """A reply as the client sends it back: its text and its tool_use blocks
    (thinking blocks are the client's copy of what the reply thought: left out,
    as OpenAI clients leave out reasoning_content)."""
    texts: list[str] = []
    calls: list[CalledTool] = []
    blocks = _text_blocks(content, f"{where}.content",
                          allow=("tool_use", "thinking", "redacted_thinking"))
    for i, block in enumerate(blocks):
        at = f"{where}.content[{i}]"
        if block["type"] == "text":
            texts.append(block["text"])
        elif block["type"] == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) \
                    or not isinstance(block.get("input"), dict):
                raise bad_field(at, "A tool_use block needs its id, name and input object.")
            calls.append(CalledTool(block["name"], block["input"], block["id"]))
    return IncomingMessage("assistant", "".join(texts), calls_signature(calls), tuple(calls))


def messages(data: dict[str, Any]) -> list[IncomingMessage]:
    out: list[IncomingMessage] = []
    called: dict[str, str] = {}
    """The last reply's tool uses: id -> tool name."""
    for where, m in message_items(data):
        if "content" not in m:
            raise missing_field(f"{where}.content")
        role = m.get("role")
        if role == "user":
            out += _user(m["content"], where, called)
            called = {}
        elif role == "assistant":
            out.append(_assistant(m["content"], where))
            called = {c.id: c.name for c in out[-1].calls}
        elif role == "system":
            blocks = _text_blocks(m["content"], f"{where}.content")
            out.append(IncomingMessage("system", "\n\n".join(b["text"] for b in blocks)))
        else:
            raise bad_field(f"{where}.role", "A message's role must be 'user', 'assistant' "
                            "or 'system'.")
    if out[-1].role == "assistant" and out[-1].calls:
        raise bad_field("messages", "A reply the request begins (the last message) may "
                        "hold text only, not tool_use blocks.")
    return out


def tools(data: dict[str, Any]) -> str | None:
    """Anthropic's tools in OpenAI's shape (how the templates are given them)."""
    anthropic_choice(data)  # checked before anything else is read
    choice = data.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else choice
    raw = data.get("tools")
    if raw is not None and not isinstance(raw, list):
        raise bad_field("tools", "'tools' must be a list.")
    converted = []
    for i, tool in enumerate(raw or ()):
        if not isinstance(tool, dict) or tool.get("type", "custom") != "custom" \
                or not isinstance(tool.get("name"), str) \
                or not isinstance(tool.get("input_schema"), dict):
            raise bad_field(f"tools[{i}]", "A tool needs a name and an input_schema object "
                            "(only custom tools are supported).")
        if tool.get("defer_loading") is True:  # loaded by a tool search first, as Anthropic's
            continue
        function = {"name": tool["name"], "parameters": tool["input_schema"]}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        converted.append({"type": "function", "function": function})
    return tool_definitions(converted, kind)


def _stops(data: dict[str, Any]) -> list[str]:
    raw = data.get("stop_sequences")
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_STOPS \
            or not all(isinstance(s, str) and s for s in raw):
        raise bad_field("stop_sequences", "'stop_sequences' must be a list of up to "
                        f"{MAX_STOPS} non-empty strings.")
    return raw


def _checked_common(data: dict[str, Any]) -> str:
    """The model's name; ``metadata`` and ``context_management`` checked (any
    edit type is accepted: none changes what the ledger keeps)."""
    model = model_name(data)
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad_field("metadata", "'metadata' must be an object.")
    if metadata and metadata.get("user_id") is not None \
            and not isinstance(metadata["user_id"], str):
        raise bad_field("metadata.user_id", "'metadata.user_id' must be a string.")
    managed = data.get("context_management")
    if managed is not None:
        edits = managed.get("edits", []) if isinstance(managed, dict) else None
        if not isinstance(edits, list) or not all(
                isinstance(e, dict) and isinstance(e.get("type"), str) for e in edits):
            raise bad_field("context_management", "'context_management' must be an object "
                            "whose 'edits' are objects with a 'type'.")
    return model


def anthropic_turn(data: dict[str, Any], header_session: str | None,
                   settings: dict[str, Any] | None = None, *,
                   window: int | None = None) -> tuple[str, ApiRequest]:
    """The model's name and the conversation (``count_tokens`` reads no more):
    system messages before the others join the system prompt."""
    model = _checked_common(data)
    leading, listed = split_leading(messages(data))
    if not listed:
        raise bad_field("messages", "The messages must hold the user's, not only system "
                        "messages.")
    system = "\n\n".join(t for t in (_system(data), *leading) if t) or None
    said, prefill = begun_reply(listed)  # a last reply of the assistant's is continued
    turn = ApiRequest(system, said,
                      {**thinking_settings(data, window=window), **(settings or {})},
                      session_name({}, header_session), tools(data), fills_window=True,
                      prefill=prefill)
    return model, turn


def anthropic_chat(data: dict[str, Any], header_session: str | None, *,
                   window: int | None = None) -> ChatRequest:
    MESSAGES.check(data)
    if data.get("max_tokens") is None:
        raise missing_field("max_tokens")
    # A max_tokens past what the window leaves is not refused: the reply stops
    # where the window is full (stop_reason model_context_window_exceeded).
    settings = sampling({k: data.get(k) for k in ("temperature", "top_p", "top_k",
                                                      "max_tokens")},
                        max_names=("max_tokens",)) | context_policy(data)
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_field("stream", "'stream' must be true or false.")
    model, turn = anthropic_turn(data, header_session, settings, window=window)
    return ChatRequest(model, turn, stream, _stops(data))
