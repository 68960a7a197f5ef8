"""What every endpoint does with a request's body and a reply's stream: the
body read within its size limit, the first piece of the reply awaited before
any status goes out (so a refusal gets its own status; a stream that starts
early, ``with_heartbeats``, sends its status once nothing came for a while),
and a streamed reply that notices at once when its client goes away."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Callable, TypeVar

import anyio
import anyio._backends._asyncio  # noqa: F401 - at start, not on the first request (lazy in anyio)
from starlette.requests import ClientDisconnect, Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from mlxchat.server.core.errors import ApiError
from mlxchat.server.core.service import Finished, Piece

T = TypeVar("T")


async def read_body(request: Request) -> bytes:
    """The whole body; 413 as soon as it passes the server's limit; ClientGone
    when the connection ends first (its client left, or sent it too slowly:
    ``serve --body-timeout``)."""
    limit: int = request.app.state.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone() from None
    return b"".join(chunks)


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"The body is over this server's limit of {limit:,} bytes.",
                    code="request_too_large")


class Heartbeat:
    """Nothing came for a while: the reply is still being prepared or computed."""


HEARTBEAT = Heartbeat()


async def with_heartbeats(items: AsyncIterator[T], every_s: float
                          ) -> AsyncIterator[T | Heartbeat]:
    """``items``, with a ``Heartbeat`` whenever none came for ``every_s`` (a
    stream that starts before its first token says it is alive while the
    request is prepared, waits for the engine or has its prompt read). The
    item awaited is never cancelled by a heartbeat; closing this cancels it."""
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield HEARTBEAT
                continue
            taken, pending = pending, None
            try:
                item = taken.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            await asyncio.wait({pending})
        await items.aclose()  # type: ignore[attr-defined]


async def started(request: Request, items: AsyncIterator[T]) -> tuple[AsyncIterator[T], T]:
    """The stream and its first item (an error before it is raised here). A
    client that goes away before it (its request waits behind others, or its
    setup waits for the compute lock) cancels the request: ClientGone."""
    try:
        first = await unless_gone(request, lambda: anext(items))
    except BaseException:
        await items.aclose()  # type: ignore[attr-defined]
        raise
    return items, first


def unsent(end: Finished, sent: str) -> str:
    """The reply's text the stream has not sent (held back at a call's markup:
    all of a call cut short, which stays text, and the text after the calls),
    so that what the client puts together is the stored reply."""
    return end.content[len(sent):] if end.content.startswith(sent) else ""


class ClientGone(Exception):
    """The client of a reply asked for whole went away before it was done."""


async def unless_gone(request: Request, read: Callable[[], Awaitable[T]]) -> T:
    """``await read()``, listening for the client's disconnect meanwhile: one
    that goes away cancels the read at once and raises ClientGone."""
    result: list[T] = []
    failed: Exception | None = None
    async with anyio.create_task_group() as group:
        async def reading() -> None:
            nonlocal failed
            try:
                result.append(await read())
            except Exception as exc:  # noqa: BLE001 - raised below, not as a group's
                failed = exc
            group.cancel_scope.cancel()

        async def listen() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(reading)
        group.start_soon(listen)
    if failed is not None:
        raise failed
    if not result:
        raise ClientGone()
    return result[0]


async def finished(request: Request, first: Piece | Finished,
                   items: AsyncIterator[Piece | Finished]) -> Finished:
    """Read the reply to its end (a reply asked for whole); a client that goes
    away cancels the turn at once (within a decode step) and gets nothing
    (raises ClientGone)."""
    async def to_the_end() -> Finished:
        item = first
        while not isinstance(item, Finished) or item.choice:  # choice 0's ends the reply
            item = await anext(items)
        return item
    try:
        return await unless_gone(request, to_the_end)
    finally:
        await items.aclose()  # type: ignore[attr-defined]  # cancels a turn still running


class DisconnectAwareStream(StreamingResponse):
    """Streams while listening for the client's disconnect, whatever ASGI
    version the server speaks: a client that goes away cancels the stream
    (and with it the turn) at once, not at the next write."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:
            async def stream() -> None:
                try:
                    await self.stream_response(send)
                except OSError:
                    pass  # the client went away mid-write
                group.cancel_scope.cancel()

            group.start_soon(stream)
            await self.listen_for_disconnect(receive)
            group.cancel_scope.cancel()
