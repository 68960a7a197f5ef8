"""Anthropic's Messages API: ``POST /v1/messages`` (one message, or streamed
as its server-sent events, started before the prefill: ``stream``) and
``POST /v1/messages/count_tokens``. Turns go through the same service, and
find their stored branch by the same ledger, as OpenAI's chat completions."""

from __future__ import annotations

from typing import Any, AsyncIterator

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.chat import Message
from mlxchat.engine.prompt.delta import TemplateOptions
from mlxchat.engine.prompt.render import render
from mlxchat.errors import MlxchatError
from mlxchat.server.anthropic.protocol import anthropic_chat, anthropic_turn
from mlxchat.server.anthropic.shape import MessageShape
from mlxchat.server.anthropic.stream import stream_events
from mlxchat.server.anthropic.thinking import omits_thinking
from mlxchat.server.core.errors import ApiError, bad_field
from mlxchat.server.core.requests import parse_json
from mlxchat.server.core.response_format import anthropic_format
from mlxchat.server.core.service import ChatService
from mlxchat.server.core.streaming import (
    DisconnectAwareStream,
    finished,
    read_body,
    started,
    with_heartbeats,
)
from mlxchat.server.core.tool_choice import anthropic_choice, constrained
from mlxchat.server.core.usage import miss_header


async def messages(request: Request) -> Response:
    service: ChatService = request.app.state.service
    data = parse_json(await read_body(request))
    chat = anthropic_chat(data, request.headers.get("x-session"), window=service.window)
    service.check_model(chat.model)
    omit = omits_thinking(data)
    shape = MessageShape(service.model_id, omit_thinking=omit)

    async def reply() -> AsyncIterator[Any]:
        chat.turn = await constrained(service.engine.loaded.tokenizer, chat.turn,
                                      anthropic_format(data), anthropic_choice(data),
                                      format_param="output_config")
        async for item in service.chat(chat, planned=chat.stream):
            yield item
    # A stream starts before its first token: once nothing came for ping_s while
    # the request is prepared, waits, or has its prompt read.
    items = with_heartbeats(reply(), request.app.state.ping_s) if chat.stream else reply()
    items, first = await started(request, items)
    if not chat.stream:
        end = await finished(request, first, items)
        return JSONResponse(shape.message(end), headers=miss_header(end))
    return DisconnectAwareStream(stream_events(shape, first, items, omit_thinking=omit),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", **miss_header(first)})


async def count_tokens(request: Request) -> Response:
    """The tokens of the prompt the engine would render for the request (its
    system prompt, messages and tools through the model's template)."""
    service: ChatService = request.app.state.service
    model, turn = anthropic_turn(parse_json(await read_body(request)),
                                 request.headers.get("x-session"))
    service.check_model(model)
    turn = service.placed(turn)
    if any(m.images for m in turn.messages):
        raise bad_field("messages", "count_tokens does not count images yet.")
    listed = ([Message("system", turn.system)] if turn.system else []) \
        + [m.stored() for m in turn.messages] \
        + ([Message("assistant", turn.prefill)] if turn.prefill else [])
    thinking = turn.settings.get("thinking", service.conv.settings.generation.thinking)
    options = TemplateOptions(enable_thinking=thinking, tools=turn.tools)
    await service.check_fits([m.content for m in listed])
    tokenizer = service.engine.loaded.tokenizer
    try:
        ids = await anyio.to_thread.run_sync(
            lambda: render(tokenizer, listed, generation_prompt=not turn.prefill,
                           open_last=bool(turn.prefill), **options.kwargs()))
    except MlxchatError as exc:  # the template refuses the conversation
        raise ApiError(400, exc.user_text(), code="invalid_request") from None
    return JSONResponse({"input_tokens": len(ids)})
