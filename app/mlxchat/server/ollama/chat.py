"""Ollama's ``POST /api/chat`` (streamed as one JSON object a line, or one
object) and ``POST /api/generate`` (a prompt as one user message through the
chat template, or ``raw``; a ``suffix`` fills in the middle)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.engine.prompt.fim import fim_ids, fim_tokens
from mlxchat.engine.turn.tool_grammar import ToolChoice
from mlxchat.server.core.errors import ApiError, bad_field
from mlxchat.server.core.logprobs import TokenTexts
from mlxchat.server.core.raw_turn import raw_work
from mlxchat.server.core.requests import ChatRequest, parse_json
from mlxchat.server.core.response_format import compiled, ollama_format
from mlxchat.server.core.service import ChatService
from mlxchat.server.core.streaming import DisconnectAwareStream, finished, read_body, started
from mlxchat.server.core.tool_choice import constrained
from mlxchat.server.ollama import replies
from mlxchat.server.ollama.facts import thinks
from mlxchat.server.ollama.options import unbounded_num_predict, unloads
from mlxchat.server.ollama.protocol import (
    GenerateRequest,
    loads_only,
    ollama_chat,
    ollama_generate,
    ollama_model,
)


def _check_thinking(service: ChatService, chat: ChatRequest) -> None:
    """``think`` on for a model that does not think: refused, as Ollama does."""
    if chat.turn.settings.get("thinking") and not thinks(service.conv.views.model_info):
        raise bad_field("think", f"'think' needs a model that thinks; {service.model_id} "
                        "does not (leave it out, or false).")


def _texts(service: ChatService, chat: ChatRequest) -> TokenTexts | None:
    """The tokens' texts, when the request asks for log-probabilities."""
    if chat.turn.options.logprobs is None:
        return None
    return TokenTexts(service.engine.loaded.tokenizer)


def _asked(data: dict[str, Any], chat: ChatRequest) -> int | None:
    """The num_predict to report a cap against (None: -1/-2 asked for none)."""
    options = data.get("options")
    if unbounded_num_predict(options if isinstance(options, dict) else {}):
        return None
    return chat.turn.settings.get("max_tokens")


def _load_only(service: ChatService, data: dict[str, Any], shape: replies.Shape) -> Response:
    """A request with nothing to answer: Ollama's load (or, keep_alive 0, unload)."""
    service.check_model(ollama_model(data))
    if unloads(data):
        raise bad_field("keep_alive", "Unloading is not supported: the server keeps its one "
                        "model loaded while it runs.")
    return JSONResponse(replies.loaded(shape))


async def _answer(request: Request, data: dict[str, Any], chat: ChatRequest,
                  shape: replies.Shape, items_first) -> Response:
    items, first = items_first
    asked = _asked(data, chat)
    if not chat.stream:
        end = await finished(request, first, items)
        return JSONResponse(replies.whole(shape, end, asked))
    return DisconnectAwareStream(replies.lines(shape, first, items, asked),
                                 media_type="application/x-ndjson")


async def chat(request: Request) -> Response:
    service: ChatService = request.app.state.service
    data = parse_json(await read_body(request))
    if loads_only(data, "messages"):
        return _load_only(service, data, replies.ChatShape(service.model_id))
    chat_request = ollama_chat(data, request.headers.get("x-session"), window=service.window)
    _check_thinking(service, chat_request)
    shape = replies.ChatShape(service.model_id, _texts(service, chat_request))
    chat_request.turn = await constrained(service.engine.loaded.tokenizer, chat_request.turn,
                                          ollama_format(data), ToolChoice(),
                                          format_param="format")
    return await _answer(request, data, chat_request, shape,
                         await started(request, service.chat(chat_request)))


async def generate(request: Request) -> Response:
    service: ChatService = request.app.state.service
    data = parse_json(await read_body(request))
    if loads_only(data, "prompt") and not data.get("suffix"):
        return _load_only(service, data, replies.GenerateShape(service.model_id))
    asked = ollama_generate(data, request.headers.get("x-session"), window=service.window)
    chat_request = asked.chat
    _check_thinking(service, chat_request)
    shape = replies.GenerateShape(service.model_id, _texts(service, chat_request))
    if not asked.raw and asked.suffix is None:
        chat_request.turn = await constrained(service.engine.loaded.tokenizer,
                                              chat_request.turn, ollama_format(data),
                                              ToolChoice(), format_param="format")
        return await _answer(request, data, chat_request, shape,
                             await started(request, service.chat(chat_request)))
    service.check_model(chat_request.model)
    output = await compiled(service.engine.loaded.tokenizer, ollama_format(data), "format")
    prompt_ids = _prompt_ids(asked, service)
    await service.check_fits([asked.prompt, asked.suffix or ""])
    work = service.run(lambda cancelled: raw_work(
        service, prompt_ids, settings=asked.settings, stop=chat_request.stop, output=output,
        cancelled=cancelled))
    return await _answer(request, data, chat_request, shape, await started(request, work))


def _prompt_ids(asked: GenerateRequest, service: ChatService):
    """How the raw prompt becomes tokens: as it is, or, with a ``suffix``, the
    model's fill-in-the-middle prompt around the gap (a 400 where it has none)."""
    if asked.suffix is None:
        return lambda tokenizer: list(tokenizer.encode(asked.prompt))
    if fim_tokens(service.engine.loaded.tokenizer) is None:
        raise ApiError(400, f"'suffix' needs a model with fill-in-the-middle tokens; "
                       f"{service.model_id} has none.", param="suffix",
                       code="unsupported_parameter")
    return lambda tokenizer: fim_ids(tokenizer, asked.prompt, asked.suffix)
