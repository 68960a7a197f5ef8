"""OpenAI's endpoints: ``POST /v1/chat/completions`` (streamed as server-sent
events, or one object) and ``GET /v1/models``."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.server.core.errors import ApiError
from mlxchat.server.core.image_fetch import fetch_images
from mlxchat.server.core.requests import ChatRequest, parse_json
from mlxchat.server.core.response_format import openai_format
from mlxchat.server.core.service import ChatService, Finished, Piece
from mlxchat.server.core.streaming import (
    DisconnectAwareStream,
    finished,
    read_body,
    started,
    unsent,
)
from mlxchat.server.core.tool_calls import openai_calls
from mlxchat.server.core.tool_choice import constrained, openai_choice
from mlxchat.server.core.usage import capped_header, capped_to, miss_header
from mlxchat.server.openai.protocol import openai_chat
from mlxchat.turn_stats import TurnStats


def usage(stats: TurnStats, asked: int | None = None, cache_miss: str | None = None
          ) -> dict[str, Any]:
    """What the turn cost; ``cached_tokens`` is what the KV cache supplied;
    ``max_tokens_capped_to`` says a ``max_tokens`` (``asked``) was more than
    the context window left; ``cache_miss_reason`` why the conversation's KV
    was recomputed (its files were evicted)."""
    out: dict[str, Any] = {
        "prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": stats.reused_tokens},
        "completion_tokens_details": {"reasoning_tokens": stats.reasoning_tokens}}
    capped = capped_to(stats, asked)
    if capped is not None:
        out["max_tokens_capped_to"] = capped
    if cache_miss:
        out["cache_miss_reason"] = cache_miss
    return out


class _ChatShape:
    """The ids and names every object of one reply carries."""

    def __init__(self, model: str, asked: int | None = None):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model
        self.asked = asked
        """The request's max_tokens, if it gave one."""

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def usage_chunk(self, end: Finished) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [],
                "usage": usage(end.stats, self.asked, end.cache_miss)}
        return f"data: {json.dumps(body)}\n\n"

    def completion(self, end: Finished) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": end.content}
        if end.tool_calls:
            message["content"] = end.content or None
            message["tool_calls"] = openai_calls(end.tool_calls)
        if end.reasoning:
            message["reasoning_content"] = end.reasoning
        return {"id": self.id, "object": "chat.completion", "created": self.created,
                "model": self.model, "usage": usage(end.stats, self.asked, end.cache_miss),
                "choices": [{"index": 0, "message": message,
                             "finish_reason": end.finish_reason}]}


def _delta(piece: Piece) -> dict[str, Any]:
    return {"reasoning_content" if piece.part == "reasoning" else "content": piece.text}


async def chat_completions(request: Request) -> Response:
    service: ChatService = request.app.state.service
    data = parse_json(await read_body(request))
    chat = openai_chat(data, request.headers.get("x-session"),
                       allow_image_urls=request.app.state.allow_image_urls,
                       window=service.window)
    service.check_model(chat.model)  # before anything is fetched for it
    chat.turn = await constrained(service.engine.loaded.tokenizer, chat.turn,
                                  openai_format(data), openai_choice(data),
                                  format_param="response_format")
    info = service.conv.views.model_info
    chat.turn = await fetch_images(chat.turn, request.app.state.image_fetch,
                                   sees=info.sees_images, model=info.name)
    shape = _ChatShape(service.model_id, chat.turn.settings.get("max_tokens"))
    items, first = await started(request, service.chat(chat))
    if not chat.stream:
        end = await finished(request, first, items)
        return JSONResponse(shape.completion(end), headers={
            **capped_header(end.stats, shape.asked), **miss_header(end)})
    return DisconnectAwareStream(_events(shape, chat, first, items),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", **miss_header(first)})


async def _events(shape: _ChatShape, chat: ChatRequest, first: Piece | Finished,
                  items: AsyncIterator[Piece | Finished]) -> AsyncIterator[str]:
    yield shape.chunk({"role": "assistant", "content": ""})
    sent = ""
    try:
        item = first
        while True:
            if isinstance(item, Finished):
                # Text held back at a call's markup (all of it when the call was cut
                # short and stays text), then the calls.
                rest = unsent(item, sent)
                if rest:
                    yield shape.chunk({"content": rest})
                if item.tool_calls:
                    yield shape.chunk({"tool_calls": openai_calls(item.tool_calls,
                                                                  streamed=True)})
                yield shape.chunk({}, item.finish_reason)
                if chat.include_usage:
                    yield shape.usage_chunk(item)
                break
            if item.part != "reasoning":
                sent += item.text
            yield shape.chunk(_delta(item))
            item = await anext(items)
    except ApiError as exc:  # after the status went out: said in the stream
        yield f"data: {json.dumps({'error': {'message': exc.message, 'code': exc.code}})}\n\n"
    finally:
        await items.aclose()
    yield "data: [DONE]\n\n"


async def models(request: Request) -> Response:
    service: ChatService = request.app.state.service
    return JSONResponse({"object": "list", "data": [
        {"id": service.model_id, "object": "model", "created": int(time.time()),
         "owned_by": "mlxchat", "parallel": service.parallel}]})
