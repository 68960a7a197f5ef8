"""The Responses API's endpoints: ``POST /v1/responses`` (one response object,
or streamed: ``stream``), and for what ``store: true`` kept,
``GET``/``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``.
Turns go through the same service as the chat API; a ``previous_response_id``
continues the stored reply on its session's saved KV (only the new input is
prefilled, after a restart too), and a stateless request (Codex: ``store:
false``, the whole input each time) finds its stored branch by the ledger."""

from __future__ import annotations

from typing import Any, AsyncIterator

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxchat.server.core.api_turns import ApiRequest
from mlxchat.server.core.errors import ApiError, bad_field
from mlxchat.server.core.image_fetch import fetch_images
from mlxchat.server.core.requests import ChatRequest, parse_json
from mlxchat.server.core.service import ChatService, Finished
from mlxchat.server.core.streaming import (DisconnectAwareStream, finished, read_body, started,
                                           with_heartbeats)
from mlxchat.server.core.tool_choice import constrained
from mlxchat.server.core.usage import miss_header
from mlxchat.server.responses.items import ReadInput, read_input
from mlxchat.server.responses.protocol import ResponsesRequest, read_request
from mlxchat.server.responses.shape import ResponseShape
from mlxchat.server.responses.stream import stream_events
from mlxchat.store.api_responses import StoredResponse

MAX_LISTED = 100


def _not_found(response_id: str) -> ApiError:
    shown = response_id[:200]
    return ApiError(404, f"Response with id '{shown}' not found.", code="not_found")


async def _previous(service: ChatService, parsed: ResponsesRequest) -> StoredResponse | None:
    if parsed.previous_id is None:
        return None
    found = await run_in_threadpool(service.store.responses.get, parsed.previous_id)
    if found is None:
        raise ApiError(400, f"Previous response with id '{parsed.previous_id[:200]}' not "
                       "found.", param="previous_response_id",
                       code="previous_response_not_found")
    return found


def _prior_calls(parsed: ResponsesRequest, previous: StoredResponse | None) -> dict[str, str]:
    """The previous response's calls (call_id -> the tool's name here)."""
    calls = {}
    for item in (previous.body.get("output") or []) if previous else []:
        if isinstance(item, dict) and item.get("type") == "function_call":
            calls[item["call_id"]] = parsed.tools.flat_name(item["name"], item.get("namespace"))
    return calls


async def _read(request: Request, service: ChatService, data: dict[str, Any],
                parsed: ResponsesRequest) -> tuple[ChatRequest, ReadInput, bytes]:
    """The request as the service takes it, its input as read, and the key
    this database seals reasoning with."""
    previous = await _previous(service, parsed)
    key = await run_in_threadpool(service.store.responses.key)
    # A follow-up keeps the stored system prompt; new instructions stand after
    # the reply as a system message (``core.system_messages``' rule).
    same = previous is not None and parsed.instructions == previous.body.get("instructions")
    read = read_input(data, tools=parsed.tools, key=key, prior_calls=_prior_calls(
        parsed, previous), instructions=None if same else parsed.instructions,
        allow_urls=request.app.state.allow_image_urls, follows_reply=previous is not None)
    turn = ApiRequest(read.system, read.messages, parsed.settings, parsed.session,
                      parsed.tools.definitions, after=previous.message_id if previous else None)
    chat = ChatRequest(parsed.model, turn, parsed.stream,
                       max_calls=1 if parsed.one_call else None)
    return chat, read, key


async def _reply(request: Request, service: ChatService, chat: ChatRequest,
                 parsed: ResponsesRequest) -> AsyncIterator[Any]:
    """The request prepared (its grammar compiled, its images fetched), then
    the service's items (``Planned`` first when it streams)."""
    chat.turn = await constrained(service.engine.loaded.tokenizer, chat.turn,
                                  parsed.text_format, parsed.tools.choice,
                                  format_param="text.format")
    info = service.conv.views.model_info
    chat.turn = await fetch_images(chat.turn, request.app.state.image_fetch,
                                   sees=info.sees_images, model=info.name)
    async for item in service.chat(chat, planned=chat.stream):
        yield item


async def create(request: Request) -> Response:
    service: ChatService = request.app.state.service
    data = parse_json(await read_body(request))
    parsed = read_request(data, request.headers.get("x-session"), window=service.window)
    service.check_model(parsed.model)
    chat, read, key = await _read(request, service, data, parsed)
    shape = ResponseShape(parsed, service.model_id, key)

    async def kept(end: Finished, body: dict[str, Any]) -> None:
        if parsed.store and end.session_id is not None and end.reply_id is not None:
            await run_in_threadpool(service.store.responses.add, shape.id, end.session_id,
                                    end.reply_id, body, read.listed)

    # A stream starts before its first token: response.created and
    # response.in_progress once nothing came for ping_s while the request is
    # prepared, waits or has its prompt read, then response.in_progress again
    # each ping_s (Codex ignores comment lines and gives up on a silent stream).
    reply = _reply(request, service, chat, parsed)
    items = with_heartbeats(reply, request.app.state.ping_s) if parsed.stream else reply
    items, first = await started(request, items)
    if not parsed.stream:
        end = await finished(request, first, items)
        body = shape.final(end, shape.output(end))
        await kept(end, body)
        return JSONResponse(body, headers=miss_header(end))
    return DisconnectAwareStream(stream_events(shape, first, items, kept),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", **miss_header(first)})


async def _stored(request: Request) -> StoredResponse:
    service: ChatService = request.app.state.service
    response_id = request.path_params["response_id"]
    found = await run_in_threadpool(service.store.responses.get, response_id)
    if found is None:
        raise _not_found(response_id)
    return found


async def retrieve(request: Request) -> Response:
    return JSONResponse((await _stored(request)).body)


async def delete(request: Request) -> Response:
    """The response is gone (neither read nor continued); its conversation stays
    a session of the server's, as every API conversation does."""
    service: ChatService = request.app.state.service
    response_id = request.path_params["response_id"]
    if await run_in_threadpool(service.store.responses.delete, response_id) is None:
        raise _not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


def _page(items: list[dict[str, Any]], query: Any) -> dict[str, Any]:
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise bad_field("order", "'order' must be 'asc' or 'desc'.")
    limit_text = query.get("limit", "20")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LISTED:
        raise bad_field("limit", f"'limit' must be a whole number from 1 to {MAX_LISTED}.")
    ordered = items if order == "asc" else items[::-1]
    after = query.get("after")
    if after is not None:
        at = [i for i, item in enumerate(ordered) if item.get("id") == after]
        if not at:
            raise bad_field("after", f"No input item has the id '{after[:200]}'.")
        ordered = ordered[at[0] + 1:]
    page = ordered[:int(limit_text)]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(ordered) > len(page)}


async def input_items(request: Request) -> Response:
    return JSONResponse(_page((await _stored(request)).input, request.query_params))
