"""OpenAI's endpoints: ``POST /v1/chat/completions`` (streamed as server-sent
events, or one object) and ``GET /v1/models``."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator, Iterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.docs.embedder import DEFAULT_EMBEDDER
from mlxchat.server.core.errors import ApiError
from mlxchat.server.core.image_fetch import fetch_images
from mlxchat.server.core.logprobs import TokenTexts, chat_logprobs
from mlxchat.server.core.requests import ChatRequest, parse_json
from mlxchat.server.core.response_format import openai_format
from mlxchat.server.core.service import ChatService, Finished, Piece
from mlxchat.server.core.streaming import (
    DisconnectAwareStream,
    Heartbeat,
    finished,
    read_body,
    started,
    unsent,
    with_heartbeats,
)
from mlxchat.server.core.tool_calls import openai_calls
from mlxchat.server.core.tool_choice import constrained, openai_choice
from mlxchat.server.core.usage import capped_header, capped_to, miss_header, window_fields
from mlxchat.server.openai.protocol import openai_chat
from mlxchat.engine.events import TokenLogprob
from mlxchat.turn_stats import TurnStats


def usage(stats: TurnStats, asked: int | None = None, cache_miss: str | None = None,
          *, generated: int | None = None) -> dict[str, Any]:
    """What the turn cost; ``cached_tokens`` is what the KV cache supplied;
    ``max_tokens_capped_to`` says a ``max_tokens`` (``asked``) was more than
    the context window left; ``cache_miss_reason`` why the conversation's KV
    was recomputed (its files were evicted); ``generated``: every choice's
    tokens (``n`` > 1), else the turn's."""
    completion = stats.generated_tokens if generated is None else generated
    out: dict[str, Any] = {
        "prompt_tokens": stats.prompt_tokens, "completion_tokens": completion,
        "total_tokens": stats.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": stats.reused_tokens},
        "completion_tokens_details": {"reasoning_tokens": stats.reasoning_tokens}}
    capped = capped_to(stats, asked)
    if capped is not None:
        out["max_tokens_capped_to"] = capped
    if cache_miss:
        out["cache_miss_reason"] = cache_miss
    return out


def every_choice(end: Finished) -> list[Finished]:
    """Every choice's end, in index order (choice 0's carries the others)."""
    return sorted([end, *end.others], key=lambda e: e.choice)


def _message(end: Finished) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": end.content}
    if end.tool_calls:
        message["content"] = end.content or None
        message["tool_calls"] = openai_calls(end.tool_calls)
    if end.reasoning:
        message["reasoning_content"] = end.reasoning
    return message


class _ChatShape:
    """The ids and names every object of one reply carries."""

    def __init__(self, model: str, asked: int | None = None, texts: TokenTexts | None = None):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model
        self.texts = texts
        """The tokens' texts, for log-probabilities (None: none are asked for)."""
        self.asked = asked
        """The request's max_tokens, if it gave one."""

    def chunk(self, delta: dict[str, Any], finish: str | None = None, *, index: int = 0,
              logprobs: dict[str, Any] | None = None) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model,
                "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                             "finish_reason": finish}]}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def usage_chunk(self, end: Finished) -> str:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [],
                "usage": self.usage(end), **window_fields(end)}
        return f"data: {json.dumps(body)}\n\n"

    def usage(self, end: Finished) -> dict[str, Any]:
        return usage(end.stats, self.asked, end.cache_miss,
                     generated=sum(e.stats.generated_tokens for e in every_choice(end)))

    def completion(self, end: Finished) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion", "created": self.created,
                "model": self.model, "usage": self.usage(end),
                "choices": [{"index": e.choice, "message": _message(e),
                             "logprobs": self.logprobs(e.logprobs),
                             "finish_reason": e.finish_reason} for e in every_choice(end)],
                **window_fields(end)}

    def piece(self, piece: Piece) -> str:
        part = "reasoning_content" if piece.part == "reasoning" else "content"
        said = self.logprobs(piece.logprobs) if piece.logprobs else None
        return self.chunk({part: piece.text}, index=piece.choice, logprobs=said)

    def logprobs(self, entries: tuple[TokenLogprob, ...] | None) -> dict[str, Any] | None:
        if entries is None or self.texts is None:
            return None
        return chat_logprobs(entries, self.texts)


async def chat_completions(request: Request) -> Response:
    service: ChatService = request.app.state.service
    data = parse_json(await read_body(request))
    chat = openai_chat(data, request.headers.get("x-session"),
                       allow_image_urls=request.app.state.allow_image_urls,
                       window=service.window)
    service.check_model(chat.model)  # before anything is fetched for it
    choice = openai_choice(data)
    chat.turn = await constrained(service.engine.loaded.tokenizer, chat.turn,
                                  openai_format(data), choice, format_param="response_format")
    info = service.conv.views.model_info
    chat.turn = await fetch_images(chat.turn, request.app.state.image_fetch,
                                   sees=info.sees_images, model=info.name)
    shape = _ChatShape(service.model_id, chat.turn.settings.get("max_tokens"),
                       TokenTexts(service.engine.loaded.tokenizer))
    # A stream starts before its first token: choice 0's role chunk, then a
    # comment line whenever nothing came for ping_s while it waits or its prompt is read.
    items = with_heartbeats(service.chat(chat, planned=True), request.app.state.ping_s) \
        if chat.stream else service.chat(chat)
    items, first = await started(request, items)
    if not chat.stream:
        end = await finished(request, first, items)
        return JSONResponse(shape.completion(end), headers={
            **capped_header(end.stats, shape.asked), **miss_header(end)})
    may_call = choice.forced or chat.turn.tools is not None
    return DisconnectAwareStream(_events(shape, chat, first, items, may_call=may_call),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", **miss_header(first)})


async def _events(shape: _ChatShape, chat: ChatRequest, first: Any,
                  items: AsyncIterator[Any], *, may_call: bool = False) -> AsyncIterator[str]:
    """``may_call``: the request offers tools, so the reply may be only tool
    calls, whose first chunk OpenAI sends with ``content: null``; choice 0's
    role chunk goes before the prefill, so it says null whenever that may be.
    The text that may follow accumulates after a null as after "" (the openai
    SDK's stream state, LangChain, the Vercel AI SDK; llama.cpp sends null on
    every reply), and a reply of calls only ends with null, not ""."""
    yield shape.chunk({"role": "assistant", "content": None if may_call else ""})
    sent: dict[int, str] = {0: ""}
    """Each choice's answer sent so far (a choice's first chunk says its role)."""
    try:
        item = first
        while True:
            if isinstance(item, Heartbeat):
                yield ": ping\n\n"  # an SSE comment: clients skip it
            if not isinstance(item, (Piece, Finished)):  # a Heartbeat, a Planned
                item = await anext(items)
                continue
            if item.choice not in sent:
                called = isinstance(item, Finished) and item.tool_calls and not item.content
                yield shape.chunk({"role": "assistant", "content": None if called else ""},
                                  index=item.choice)
                sent[item.choice] = ""
            if isinstance(item, Finished):
                for chunk in _ended(shape, item, sent[item.choice]):
                    yield chunk
                if not item.choice:  # the last item
                    if chat.include_usage:
                        yield shape.usage_chunk(item)
                    break
            else:
                if item.part != "reasoning":
                    sent[item.choice] += item.text
                yield shape.piece(item)
            item = await anext(items)
    except ApiError as exc:  # after the status went out: said in the stream
        yield f"data: {json.dumps({'error': {'message': exc.message, 'code': exc.code}})}\n\n"
    finally:
        await items.aclose()
    yield "data: [DONE]\n\n"


def _ended(shape: _ChatShape, end: Finished, sent: str) -> Iterator[str]:
    """A choice's last chunks: text held back at a call's markup (all of it
    when the call was cut short and stays text), the calls, the finish."""
    rest = unsent(end, sent)
    if rest:
        yield shape.chunk({"content": rest}, index=end.choice)
    if end.tool_calls:
        yield shape.chunk({"tool_calls": openai_calls(end.tool_calls, streamed=True)},
                          index=end.choice)
    yield shape.chunk({}, end.finish_reason, index=end.choice)


async def models(request: Request) -> Response:
    """The chat model first (clients that take the first model chat with it),
    then the embedder ``/v1/embeddings`` serves. OpenAI's list says no kind;
    ``type`` is LM Studio's word for it ("llm", "vlm", "embeddings"), which
    clients of OpenAI-compatible servers read to tell an embedder apart."""
    service: ChatService = request.app.state.service
    created = int(request.app.state.started_at)
    sees = service.conv.views.model_info.sees_images
    return JSONResponse({"object": "list", "data": [
        {"id": service.model_id, "object": "model", "created": created,
         "owned_by": "mlxchat", "type": "vlm" if sees else "llm",
         "parallel": service.parallel},
        {"id": DEFAULT_EMBEDDER, "object": "model", "created": created,
         "owned_by": "mlxchat", "type": "embeddings"}]})
