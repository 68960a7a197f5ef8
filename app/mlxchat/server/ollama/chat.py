"""Ollama's endpoints: ``POST /api/chat`` (streamed as one JSON object a line,
or one object) and ``GET /api/tags``."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.chat import CalledTool
from mlxchat.engine.turn.tool_grammar import ToolChoice
from mlxchat.server.core.errors import ApiError
from mlxchat.server.core.requests import parse_json
from mlxchat.server.core.response_format import ollama_format
from mlxchat.server.core.service import ChatService, Finished, Piece
from mlxchat.server.core.streaming import (
    DisconnectAwareStream,
    finished,
    read_body,
    started,
    unsent,
)
from mlxchat.server.core.tool_calls import ollama_calls
from mlxchat.server.core.tool_choice import constrained
from mlxchat.server.core.usage import capped_to
from mlxchat.server.ollama.protocol import ollama_chat, unbounded_num_predict

NS = 1_000_000_000


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _message(content: str, thinking: str = "",
             calls: tuple[CalledTool, ...] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    if calls:
        message["tool_calls"] = ollama_calls(calls)
    return message


def _final(model: str, end: Finished, message: dict[str, Any],
           asked: int | None = None) -> dict[str, Any]:
    s = end.stats
    capped = capped_to(s, asked)  # num_predict past the window: says how far it went
    return {"model": model, "created_at": _now(), "message": message, "done": True,
            **({} if capped is None else {"num_predict_capped_to": capped}),
            # Ollama says "stop" after tool calls too
            "done_reason": "stop" if end.tool_calls else end.finish_reason, "total_duration": int(s.total_s * NS),
            "load_duration": 0, "prompt_eval_count": s.prefilled_tokens,
            "prompt_eval_duration": int(s.ttft_s * NS), "eval_count": s.generated_tokens,
            "eval_duration": int(max(s.total_s - s.ttft_s, 0) * NS)}


async def chat(request: Request) -> Response:
    service: ChatService = request.app.state.service
    data = parse_json(await read_body(request))
    chat_request = ollama_chat(data, request.headers.get("x-session"), window=service.window)
    chat_request.turn = await constrained(service.engine.loaded.tokenizer, chat_request.turn,
                                          ollama_format(data), ToolChoice(),
                                          format_param="format")
    items, first = await started(request, service.chat(chat_request))
    model = service.model_id
    asked = None if unbounded_num_predict(data.get("options") or {}) else \
        chat_request.turn.settings.get("max_tokens")  # -1/-2 asked for no cap to report
    if not chat_request.stream:
        end = await finished(request, first, items)
        return JSONResponse(_final(model, end, _message(end.content, end.reasoning,
                                                        end.tool_calls), asked))
    return DisconnectAwareStream(_lines(model, first, items, asked),
                                 media_type="application/x-ndjson")


async def _lines(model: str, first: Piece | Finished, items: AsyncIterator[Piece | Finished],
                 asked: int | None = None) -> AsyncIterator[str]:
    sent = ""
    try:
        item = first
        while not isinstance(item, Finished):
            message = _message("", item.text) if item.part == "reasoning" \
                else _message(item.text)
            sent += "" if item.part == "reasoning" else item.text
            line = {"model": model, "created_at": _now(), "message": message, "done": False}
            yield json.dumps(line, ensure_ascii=False) + "\n"
            item = await anext(items)
        rest = unsent(item, sent)
        if rest:  # held back at a call's markup
            line = {"model": model, "created_at": _now(), "message": _message(rest),
                    "done": False}
            yield json.dumps(line, ensure_ascii=False) + "\n"
        if item.tool_calls:  # as Ollama streams them: one message before the last
            line = {"model": model, "created_at": _now(), "done": False,
                    "message": _message("", "", item.tool_calls)}
            yield json.dumps(line, ensure_ascii=False) + "\n"
        yield json.dumps(_final(model, item, _message(""), asked)) + "\n"
    except ApiError as exc:  # after the status went out: said in the stream
        yield json.dumps({"error": exc.message}) + "\n"
    finally:
        await items.aclose()  # type: ignore[attr-defined]


async def tags(request: Request) -> Response:
    service: ChatService = request.app.state.service
    info = service.conv.views.model_info
    return JSONResponse({"models": [{
        "name": service.model_id, "model": service.model_id,
        "modified_at": datetime.fromtimestamp(time.time(), timezone.utc).isoformat(),
        "size": info.weights_bytes, "digest": info.fingerprint,
        "details": {"format": "mlx", "family": info.architecture,
                    "parameter_size": f"{info.parameter_count / 1e9:.2f}B",
                    "quantization_level": info.quantization}}]})
