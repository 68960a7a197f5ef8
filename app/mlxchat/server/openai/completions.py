"""OpenAI's ``POST /v1/completions``: raw prompts (``completion_run`` reads
and runs them), each choice's text in the legacy shape, streamed or whole;
``echo`` puts the prompt first, ``logprobs`` gives each token's figures
(the echoed prompt's too, its first token's null), ``best_of`` above ``n``
keeps the choices with the highest mean log-probability."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.server.core.errors import ApiError
from mlxchat.server.core.logprobs import TokenTexts, legacy, with_first
from mlxchat.server.core.requests import parse_json
from mlxchat.server.core.response_format import compiled, openai_format
from mlxchat.server.core.service import ChatService, Finished, Piece
from mlxchat.server.core.streaming import (DisconnectAwareStream, read_body, started,
                                           unless_gone)
from mlxchat.server.core.usage import capped_header
from mlxchat.server.openai.chat import usage
from mlxchat.server.openai.completion_run import (ChoiceEnd, CompletionRequest, Echoed, parse,
                                                  work)

Item = Piece | Echoed | ChoiceEnd | Finished


class _CompletionShape:
    def __init__(self, model: str, request: CompletionRequest, texts: TokenTexts):
        self.id = f"cmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model, self.request, self.texts = model, request, texts
        self.offsets: dict[int, int] = {}
        """Where each choice's next text starts (its echoed prompt first)."""

    def body(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created,
                "model": self.model, **extra, "choices": choices}

    def echoed(self, echo: Echoed) -> dict[str, Any] | None:
        """The echoed prompt's figures (None: not asked for)."""
        self.offsets[echo.choice] = len(echo.text)
        if not self.request.logprobs or echo.figures is None:
            return None
        return with_first(echo.figures, self.texts, echo.first)

    def said(self, piece: Piece) -> dict[str, Any] | None:
        """A piece's figures, at its place in the choice's text."""
        at = self.offsets.get(piece.choice, 0)
        self.offsets[piece.choice] = at + len(piece.text)
        return legacy(piece.logprobs, self.texts, offset=at) if self.request.logprobs else None

    def usage(self, end: Finished) -> dict[str, Any]:
        return usage(end.stats, self.request.settings["max_tokens"])


async def completions(request: Request) -> Response:
    service: ChatService = request.app.state.service
    data = parse_json(await read_body(request))
    completion = parse(data, window=service.window)
    service.check_model(completion.model)
    completion.output = await compiled(service.engine.loaded.tokenizer, openai_format(data),
                                       "response_format")
    await service.check_fits([p for p in completion.prompts if isinstance(p, str)]
                             + ([completion.suffix] if completion.suffix else []))
    shape = _CompletionShape(service.model_id, completion,
                             TokenTexts(service.engine.loaded.tokenizer))
    items, first = await started(request, service.run(
        lambda cancelled: work(service, completion, cancelled)))
    if not completion.stream:
        every = await _to_the_end(request, first, items)
        end = every[-1]
        assert isinstance(end, Finished)
        return JSONResponse(shape.body(_choices(shape, every), usage=shape.usage(end)),
                            headers=capped_header(end.stats, completion.settings["max_tokens"]))
    return DisconnectAwareStream(_events(shape, first, items), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})


async def _to_the_end(request: Request, first: Item, items: AsyncIterator[Item]) -> list[Item]:
    """Every item of the reply (asked for whole); a client that goes away
    cancels it at once."""
    async def read() -> list[Item]:
        return [first] + [item async for item in items]
    try:
        return await unless_gone(request, read)
    finally:
        await items.aclose()  # type: ignore[attr-defined]


def _choices(shape: _CompletionShape, every: list[Item]) -> list[dict[str, Any]]:
    """Each returned choice, in index order: its echoed prompt, its text, its figures."""
    made: dict[int, dict[str, Any]] = {}
    scores: dict[int, float] = {}
    for item in every:
        if isinstance(item, Echoed):
            made[item.choice] = {"text": item.text, "logprobs": shape.echoed(item)}
        elif isinstance(item, Piece):
            mine = made.setdefault(item.choice, {"text": "", "logprobs": None})
            figures = shape.said(item)
            if figures is not None:
                old = mine["logprobs"] or {k: [] for k in figures}
                mine["logprobs"] = {k: old[k] + figures[k] for k in figures}
        elif isinstance(item, ChoiceEnd):
            mine = made.setdefault(item.choice, {"text": "", "logprobs": None})
            mine["text"] += item.text
            mine["finish_reason"] = item.finish_reason
            if shape.request.logprobs and mine["logprobs"] is None:
                mine["logprobs"] = legacy((), shape.texts)
            lps = [f.logprob for f in item.figures or ()]
            scores[item.choice] = sum(lps) / len(lps) if lps else 0.0
    return [{"index": i, **made[c]} for i, c in enumerate(_kept(shape.request, scores))]


def _kept(request: CompletionRequest, scores: dict[int, float]) -> list[int]:
    """The choices returned: all of them, or each prompt's ``n`` best of its
    ``best_of`` by mean log-probability (in the order they were sampled)."""
    sampled = request.options.choices
    if sampled == request.n:
        return sorted(scores)
    out = []
    for p in range(len(request.prompts)):
        mine = [c for c in scores if c // sampled == p]
        out += sorted(sorted(mine, key=lambda c: -scores[c])[:request.n])
    return out


async def _events(shape: _CompletionShape, first: Item,
                  items: AsyncIterator[Item]) -> AsyncIterator[str]:
    def event(choice: int, text: str, figures: Any = None, finish: str | None = None) -> str:
        body = shape.body([{"index": choice, "text": text, "logprobs": figures,
                            "finish_reason": finish}])
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    try:
        item = first
        while not isinstance(item, Finished):
            if isinstance(item, Echoed):
                yield event(item.choice, item.text, shape.echoed(item))
            elif isinstance(item, Piece):
                yield event(item.choice, item.text, shape.said(item))
            else:
                yield event(item.choice, "", None, item.finish_reason)
            item = await anext(items)
        if shape.request.include_usage:
            yield f"data: {json.dumps(shape.body([], usage=shape.usage(item)))}\n\n"
    except ApiError as exc:  # after the status went out: said in the stream
        yield f"data: {json.dumps({'error': {'message': exc.message, 'code': exc.code}})}\n\n"
    finally:
        await items.aclose()  # type: ignore[attr-defined]
    yield "data: [DONE]\n\n"
