"""Fetching the http(s) image URLs of a request (only with ``serve
--allow-image-urls``), off the request's path: async, so the server answers
others meanwhile; one deadline for all of a request's fetches (connecting,
redirects, every byte: a server that trickles holds nothing past it); the
size cap checked as the bytes arrive, never read past; redirects followed
only to http(s), a bounded number of them; only public addresses are reached
unless the user allowed private ones (``fetch_guard``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import anyio
import httpx2

from mlxchat.models.vision import images as vision_images
from mlxchat.server.core import fetch_guard, images
from mlxchat.server.core.api_turns import ApiRequest, IncomingMessage
from mlxchat.server.core.errors import ApiError, bad_field
from mlxchat.server.core.images import ImageBlob
from mlxchat.server.core.tool_calls import calls_signature


@dataclass(frozen=True)
class FetchLimits:
    """How far the server goes to fetch a request's image URLs."""

    deadline_s: float = 10.0
    """All of a request's fetches together, from the first connect to the last byte."""
    max_bytes: int = vision_images.MAX_FILE_BYTES
    """One image's bytes; the fetch stops as soon as they pass it."""
    max_redirects: int = 5
    max_urls: int = 16
    """Image URLs one request may name."""
    private: bool = False
    """Loopback, LAN and link-local addresses may be fetched from too."""


def _refused(param: str, text: str) -> ApiError:
    return ApiError(400, f"The image could not be fetched: {text}.", param=param,
                    code="invalid_image_url")


async def _read(reply: httpx2.Response, url: str, param: str, limits: FetchLimits) -> bytes:
    """The body of a 200 reply, refused as soon as it passes the cap."""
    if reply.status_code != 200:
        raise _refused(param, f"{url} answered {reply.status_code}")
    encoding = reply.headers.get("content-encoding", "identity").lower()
    if encoding != "identity":  # asked for none: a compressed body could be a bomb
        raise _refused(param, f"{url} sent it compressed ({encoding})")
    over = _refused(param, f"it is over {limits.max_bytes:,} bytes")
    declared = reply.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limits.max_bytes:
        raise over
    chunks, size = [], 0
    async for chunk in reply.aiter_raw():
        size += len(chunk)
        if size > limits.max_bytes:
            raise over
        chunks.append(chunk)
    return b"".join(chunks)


async def fetch_image(client: httpx2.AsyncClient, url: str, param: str,
                      limits: FetchLimits) -> bytes:
    """One image's bytes, following at most ``limits.max_redirects`` http(s)
    redirects (the caller bounds the time)."""
    for _ in range(limits.max_redirects + 1):
        try:
            async with client.stream("GET", url, headers={"Accept": "image/*",
                                                          "Accept-Encoding": "identity"}
                                     ) as reply:
                if not reply.is_redirect:
                    return await _read(reply, url, param, limits)
                target = reply.url.join(reply.headers["location"])
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            raise _refused(param, f"{url}: {' '.join(str(exc).split()) or type(exc).__name__}"
                           ) from None
        if target.scheme not in ("http", "https"):
            raise _refused(param, f"{url} redirects to {target.scheme}:, and only http and "
                           "https are followed")
        url = str(target)
    raise _refused(param, f"more than {limits.max_redirects} redirects")


def _pending(turn: ApiRequest) -> list[ImageBlob]:
    return [b for m in turn.messages for b in m.images if b.url is not None]


async def fetch_images(turn: ApiRequest, limits: FetchLimits, *, sees: bool,
                       model: str) -> ApiRequest:
    """``turn`` with its image URLs' bytes in place (each URL fetched once), or
    a 400 naming the part whose fetch failed; nothing fetched for a model that
    sees no images."""
    pending = _pending(turn)
    if not pending:
        return turn
    images.check_seen(pending, sees=sees, model=model)
    if len(pending) > limits.max_urls:
        raise bad_field(pending[limits.max_urls].param,
                        f"A request may name at most {limits.max_urls} image URLs.")
    fetched: dict[str, bytes] = {}
    try:
        with anyio.fail_after(limits.deadline_s):
            async with httpx2.AsyncClient(trust_env=False, timeout=None,
                                          transport=fetch_guard.transport(
                                              private=limits.private)) as client:
                for blob in pending:
                    assert blob.url is not None
                    if blob.url not in fetched:
                        fetched[blob.url] = await fetch_image(client, blob.url, blob.param,
                                                              limits)
    except TimeoutError:
        late = next(b for b in pending if b.url not in fetched)
        raise _refused(late.param, f"{late.url} did not arrive within "
                       f"{limits.deadline_s:g} s") from None
    return dataclasses.replace(turn, messages=[_with_bytes(m, fetched) for m in turn.messages])


def _with_bytes(message: IncomingMessage, fetched: dict[str, bytes]) -> IncomingMessage:
    if not any(b.url is not None for b in message.images):
        return message
    blobs = tuple(ImageBlob(fetched[b.url], b.param) if b.url is not None else b
                  for b in message.images)
    return dataclasses.replace(message, images=blobs,
                               signature=calls_signature(message.calls) + images.signature(blobs))
