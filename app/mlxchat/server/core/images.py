"""Images in API requests: OpenAI's ``image_url`` content parts (data URLs;
http(s) URLs only with ``--allow-image-urls``, never fetched otherwise, and
then by ``image_fetch`` once the request is read) and Ollama's ``images``
(base64). Each is checked like a file given to /image and kept in the image
store by the hash of its bytes before anything of the request is stored; a
bad one is a 400 naming its field."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxchat.chat import ImageRef
from mlxchat.errors import MlxchatError
from mlxchat.models.vision import images as vision_images
from mlxchat.server.core.errors import bad_field
from mlxchat.store.image_files import store_image


@dataclass(frozen=True)
class ImageBlob:
    """An image's bytes as a request carried them, and the field it came in."""

    data: bytes
    param: str
    url: str | None = None
    """An allowed http(s) URL not fetched yet (``data`` empty until then)."""

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def _base64(text: str, param: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise bad_field(param, "The image is not valid base64.") from None


def from_url(url: Any, param: str, *, allow_urls: bool) -> ImageBlob:
    """An ``image_url`` part's image: a data URL, or with ``allow_urls`` one fetched."""
    if not isinstance(url, str) or not url:
        raise bad_field(param, "'image_url.url' must be a data URL (data:image/...;base64,...).")
    if url.startswith("data:"):
        head, sep, body = url.partition(",")
        if not sep or not head.endswith(";base64"):
            raise bad_field(param, "A data URL image must be base64 (data:image/png;base64,...).")
        return ImageBlob(_base64(body, param), param)
    if url.startswith(("http://", "https://")):
        if not allow_urls:
            raise bad_field(param, "Image URLs are not fetched: send the image as a data URL, "
                            "or start the server with --allow-image-urls.")
        return ImageBlob(b"", param, url)  # fetched once the whole request is read
    raise bad_field(param, "'image_url.url' must be a data URL or an http(s) URL.")


def signature(blobs: tuple[ImageBlob, ...]) -> str:
    """What a message's images add to its signature: their digests."""
    return "".join(f"\0image:{b.digest}" for b in blobs)


def check_seen(blobs: list[ImageBlob] | tuple[ImageBlob, ...], *, sees: bool,
               model: str) -> None:
    """A 400 when a request shows images to a model that sees none."""
    if blobs and not sees:
        raise bad_field(blobs[0].param, f"{model} sees no images; send text only or serve a "
                        "vision-language model.")


def from_base64(text: Any, param: str) -> ImageBlob:
    """One of an Ollama message's ``images``."""
    if not isinstance(text, str) or not text:
        raise bad_field(param, "Each of 'images' must be a base64 string.")
    return ImageBlob(_base64(text, param), param)


def keep(blobs: tuple[ImageBlob, ...], *, sees: bool, model: str) -> tuple[ImageRef, ...]:
    """Check every image first (decoded once), then keep them by their hash;
    a 400 (nothing kept) when the model sees none or one is bad."""
    check_seen(blobs, sees=sees, model=model)
    if not blobs:  # no temporary folder for each text-only message of a long history
        return ()
    checked: list[tuple[Path, vision_images.Header]] = []
    with tempfile.TemporaryDirectory(prefix="mlxchat-image-") as folder:
        for n, blob in enumerate(blobs):
            own = Path(folder) / str(n)
            own.mkdir()
            path = own / "the image"  # how the one-line refusals name it
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob.data)
            try:
                checked.append((path, vision_images.check(path)))
            except MlxchatError as exc:
                raise bad_field(blob.param, exc.user_text()) from None
        return tuple(store_image(path, name=f"image-{blob.digest[:12]}", width=header.width,
                                 height=header.height)
                     for blob, (path, header) in zip(blobs, checked))
