"""Images messages show: each file kept once under ``paths.images_dir()``,
named by the sha256 of its bytes (0600, written to a temp file, fsynced and
renamed: a kill leaves the image whole or absent), and referenced from its
message by that hash (schema version 17). The store checks no pixels: the
session checks an image before it is stored (``models.vision.images``)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from pathlib import Path

from mlxchat.chat import ImageRef
from mlxchat.paths import image_file, images_dir
from mlxchat.store.errors import StoreError

V17_MESSAGE_IMAGES = (
    # The images a user message shows, in order: JSON list of {digest, name,
    # width, height}; the bytes are the file named by the digest in images_dir().
    "ALTER TABLE messages ADD COLUMN images TEXT",
)


def store_image(source: Path, *, name: str = "", width: int = 0, height: int = 0) -> ImageRef:
    """Keep the bytes of ``source`` once by their hash; its reference."""
    return store_image_bytes(Path(source).read_bytes(), name=name or Path(source).name,
                             width=width, height=height)


def store_image_bytes(data: bytes, *, name: str, width: int = 0, height: int = 0) -> ImageRef:
    """Keep ``data`` once by its hash (atomically, 0600); its reference."""
    digest = hashlib.sha256(data).hexdigest()
    target = image_file(digest)
    if not (target.is_file() and target.stat().st_size == len(data)):
        folder = images_dir()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = folder / f".{digest}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return ImageRef(digest=digest, path=str(target), name=name, width=width, height=height)


def images_to_json(images: tuple[ImageRef, ...]) -> str | None:
    if not images:
        return None
    return json.dumps([{"digest": i.digest, "name": i.name, "width": i.width,
                        "height": i.height} for i in images])


def images_from_json(text: str | None) -> tuple[ImageRef, ...]:
    """A message's images; an unreadable list (a hand edit) reads as none."""
    try:
        rows = json.loads(text) if text else []
        return tuple(ImageRef(digest=str(r["digest"]), path=str(image_file(str(r["digest"]))),
                              name=str(r.get("name", "")), width=int(r.get("width", 0)),
                              height=int(r.get("height", 0))) for r in rows)
    except (ValueError, TypeError, KeyError, AttributeError):
        return ()


def export_images(images: tuple[ImageRef, ...]) -> list[dict]:
    """A message's images for a JSON export: each with its bytes (base64), or
    without them when the file is gone (an import then keeps the reference)."""
    out = []
    for i in images:
        row = {"digest": i.digest, "name": i.name, "width": i.width, "height": i.height}
        try:
            row["data"] = base64.b64encode(Path(i.path).read_bytes()).decode("ascii")
        except OSError:
            pass
        out.append(row)
    return out


def import_images(rows: list, where: str, keep: dict[str, bytes]) -> tuple[ImageRef, ...]:
    """A JSON export's images for one message, their bytes checked against
    their digest and put in ``keep`` (stored by ``keep_imported`` once the whole
    file has passed); StoreError (one line) when one is malformed."""
    out = []
    for n, row in enumerate(rows):
        at = f"{where}.images[{n}]"
        if not isinstance(row, dict) or not isinstance(row.get("digest"), str):
            raise StoreError(f"Not an importable session: {at} has no digest.")
        digest, name = row["digest"], str(row.get("name") or "")
        size = (int(row.get("width") or 0), int(row.get("height") or 0))
        data = row.get("data")
        if data is None:
            out.append(ImageRef(digest, str(image_file(digest)), name, *size))
            continue
        try:
            raw = base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise StoreError(f"Not an importable session: {at}.data is not base64.") from None
        if hashlib.sha256(raw).hexdigest() != digest:
            raise StoreError(f"Not an importable session: {at}.data does not match its digest.")
        keep[digest] = raw
        out.append(ImageRef(digest, str(image_file(digest)), name, *size))
    return tuple(out)


def keep_imported(keep: dict[str, bytes]) -> None:
    for raw in keep.values():
        store_image_bytes(raw, name="")
