"""OpenAI's ``POST /v1/completions``: a raw prompt, no chat template and no
conversation. It runs on the engine directly, in the lane like every turn,
and stores nothing (a throwaway); the chat session whose KV it displaced
gets its branch back from its segments on its next turn."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.engine.prompt.fit import FittedPrompt
from mlxchat.engine.turn.constrained import CompiledFormat
from mlxchat.server.core.errors import ApiError, bad_field, missing_field, server_stopped
from mlxchat.server.core.requests import parse_json, sampling, stop_strings
from mlxchat.server.core.response_format import compiled, openai_format
from mlxchat.server.core.service import (
    ChatService,
    Finished,
    Piece,
    StopWatch,
    started_unless_gone,
)
from mlxchat.server.core.streaming import DisconnectAwareStream, finished, read_body, started
from mlxchat.server.core.usage import capped_header
from mlxchat.server.openai.chat import usage
from mlxchat.server.openai.protocol import openai_common

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions


@dataclass
class CompletionRequest:
    model: str
    prompt: str
    settings: dict[str, Any]
    stream: bool
    stop: list[str]
    include_usage: bool
    output: CompiledFormat | None = None
    """The schema the completion follows (``response_format``), compiled."""


def parse(data: dict[str, Any], *, window: int | None = None) -> CompletionRequest:
    common = openai_common(data)
    if "prompt" not in data:
        raise missing_field("prompt")
    prompt = data["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise bad_field("prompt", "'prompt' must be a non-empty string.")
    for name in ("echo", "logprobs", "suffix", "best_of"):
        if data.get(name) not in (None, False, 1 if name == "best_of" else None):
            raise ApiError(400, f"'{name}' is not supported by this server.", param=name,
                           code="unsupported_parameter")
    settings = {"max_tokens": DEFAULT_MAX_TOKENS,
                **sampling(data, max_names=("max_tokens",), window=window)}
    return CompletionRequest(common.model, prompt, settings, common.stream,
                             stop_strings(data.get("stop")), common.include_usage)


def _work(service: ChatService, request: CompletionRequest, cancelled: threading.Event
          ) -> Iterator[Piece | Finished]:
    """On the lane's thread: the prompt's tokens straight through the engine."""
    if cancelled.is_set():
        return
    engine = service.engine
    settings = dataclasses.replace(service.conv.settings.generation, context_policy="stop",
                                   **request.settings)
    settings.check()
    tokens = list(engine.loaded.tokenizer.encode(request.prompt))
    window = engine.prompts.window(settings)
    if len(tokens) + 1 > window:
        raise ApiError(400, f"The prompt has {len(tokens):,} tokens; this model's window "
                       f"is {window:,}.", param="prompt", code="context_length_exceeded")
    service.cache_taken = True
    watch = StopWatch(request.stop)
    done: TurnDone | None = None
    turn = engine.turn(FittedPrompt(tokens, [], 0), settings, output=request.output)
    for event in started_unless_gone(turn, cancelled):
        if cancelled.is_set() or watch.stopped:
            engine.cancel()
        if isinstance(event, TextDelta):
            text = watch.feed(event.text)  # no template: reasoning is text like any other
            if text:
                yield Piece(text)
        elif isinstance(event, TurnDone):
            done = event
    if done is None:
        return
    if done.stats.finish_reason == "cancelled" and not watch.stopped:
        raise server_stopped()  # as a chat completion says it
    rest = watch.flush()
    if rest:
        yield Piece(rest)
    reason = "stop" if watch.stopped else {"length": "length"}.get(
        done.stats.finish_reason, "stop")
    yield Finished(watch.seen, "", done.stats, reason, None)


class _CompletionShape:
    def __init__(self, model: str):
        self.id = f"cmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model

    def body(self, text: str, finish: str | None, **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created,
                "model": self.model, **extra,
                "choices": [{"index": 0, "text": text, "logprobs": None,
                             "finish_reason": finish}]}


async def completions(request: Request) -> Response:
    service: ChatService = request.app.state.service
    data = parse_json(await read_body(request))
    completion = parse(data, window=service.window)
    service.check_model(completion.model)
    completion.output = await compiled(service.engine.loaded.tokenizer, openai_format(data),
                                       "response_format")
    await service.check_fits([completion.prompt])
    shape = _CompletionShape(service.model_id)
    items, first = await started(request, service.run(
        lambda cancelled: _work(service, completion, cancelled)))
    if not completion.stream:
        end = await finished(request, first, items)
        asked = completion.settings["max_tokens"]
        return JSONResponse(shape.body(end.content, end.finish_reason,
                                       usage=usage(end.stats, asked)),
                            headers=capped_header(end.stats, asked))
    return DisconnectAwareStream(_events(shape, completion, first, items),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})


async def _events(shape: _CompletionShape, completion: CompletionRequest, first: Piece | Finished,
                  items: AsyncIterator[Piece | Finished]) -> AsyncIterator[str]:
    def event(body: dict[str, Any]) -> str:
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    try:
        item = first
        while not isinstance(item, Finished):
            yield event(shape.body(item.text, None))
            item = await anext(items)
        yield event(shape.body("", item.finish_reason))
        if completion.include_usage:
            yield event({**shape.body("", None), "choices": [],
                         "usage": usage(item.stats, completion.settings["max_tokens"])})
    except ApiError as exc:  # after the status went out: said in the stream
        yield event({"error": {"message": exc.message, "code": exc.code}})
    finally:
        await items.aclose()  # type: ignore[attr-defined]
    yield "data: [DONE]\n\n"
