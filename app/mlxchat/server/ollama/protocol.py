"""Ollama's chat and generate requests read into what the service runs: every
field checked, each problem one 400 naming the field (in Ollama's shape)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlxchat.server.core import images
from mlxchat.server.core.api_turns import ApiRequest, IncomingMessage
from mlxchat.server.core.errors import bad_field, missing_field
from mlxchat.server.core.requests import (
    ChatRequest,
    _messages,
    context_policy,
    session_name,
    tool_definitions,
)
from mlxchat.server.ollama.options import (
    option_settings,
    reply_options,
    request_wide,
    stops,
    thinking,
)



def ollama_model(data: dict[str, Any]) -> str:
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise missing_field("model")
    return model


def ollama_chat(data: dict[str, Any], header_session: str | None, *,
                window: int | None = None) -> ChatRequest:
    model = ollama_model(data)
    stream = request_wide(data)
    system, messages = _messages(data, ollama=True)
    settings = {**thinking(data), **option_settings(data, window=window), **context_policy(data)}
    tools = tool_definitions(data.get("tools"), None)
    turn = ApiRequest(system, messages, settings, session_name({}, header_session), tools,
                      options=reply_options(data))
    return ChatRequest(model, turn, stream, stops(data))


def loads_only(data: dict[str, Any], key: str) -> bool:
    """A request without ``key`` (messages, prompt) or with it empty: Ollama's
    way to load the model (or, with keep_alive 0, to unload it)."""
    value = data.get(key)
    return value is None or value == "" or value == []


REFUSED = {
    "context": "'context' (an earlier reply's token ids) is not supported: send the "
               "conversation to /api/chat, where the server keeps its KV cache.",
    "template": "'template' (a Go template) is not supported: the model's own chat "
                "template renders the prompt; send raw: true with a prompt you formatted.",
    "width": "image generation ('width') is not supported.",
    "height": "image generation ('height') is not supported.",
    "steps": "image generation ('steps') is not supported.",
}


@dataclass
class GenerateRequest:
    """``/api/generate``: a chat turn of one user message, or a raw prompt."""

    chat: ChatRequest
    raw: bool = False
    prompt: str = ""
    suffix: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)


def _text(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise bad_field(name, f"'{name}' must be a string.")
    return value


def ollama_generate(data: dict[str, Any], header_session: str | None, *,
                    window: int | None = None) -> GenerateRequest:
    model = ollama_model(data)
    stream = request_wide(data)
    for name, why in REFUSED.items():
        if data.get(name) not in (None, [], ""):
            raise bad_field(name, why)
    prompt = _text(data, "prompt") or ""
    system = _text(data, "system")
    suffix = _text(data, "suffix") or None
    raw = data.get("raw", False)
    if not isinstance(raw, bool):
        raise bad_field("raw", "'raw' must be true or false.")
    raw_images = data.get("images")
    if raw_images is not None and not isinstance(raw_images, list):
        raise bad_field("images", "'images' must be a list of base64 strings.")
    blobs = tuple(images.from_base64(b, f"images[{n}]") for n, b in enumerate(raw_images or []))
    if raw and (system or blobs):
        name = "system" if system else "images"
        raise bad_field(name, f"'{name}' cannot go with raw: true: a raw prompt has no "
                        "template to place it in.")
    if suffix is not None and (blobs or system):
        name = "images" if blobs else "system"
        raise bad_field(name, f"'{name}' cannot go with 'suffix': a fill-in-the-middle "
                        "prompt has no template to place it in.")
    settings = {**thinking(data), **option_settings(data, window=window)}
    options = reply_options(data)
    if (raw or suffix is not None) and options.shapes:
        raise bad_field("logprobs" if options.logprobs is not None else "options",
                        "'logprobs' and penalties go with a prompt rendered through the "
                        "template, not with raw or a suffix.")
    message = IncomingMessage("user", prompt, images.signature(blobs), images=blobs)
    turn = ApiRequest(system or None, [message], settings, session_name({}, header_session),
                      options=options)
    return GenerateRequest(ChatRequest(model, turn, stream, stops(data)), raw=raw,
                           prompt=prompt, suffix=suffix, settings=settings)
