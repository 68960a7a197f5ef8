"""Images as a vision-language model takes them: checked by their header,
decoded once, resized and cut into patches by the model's own image processor.

An image is known everywhere by a key: a negative token id derived from the
hash of its bytes and the processor's settings (size limits, patch and merge
sizes). Its placeholder tokens in a prompt are that id repeated, so the token
ledger, the live cache and the KV segments hold an image span like any other
tokens: the same image under the same settings is the same span, and a prefix
that holds it is reused.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlxchat.chat import ImageRef
from mlxchat.errors import MlxchatError

MAX_FILE_BYTES = 64 << 20
"""Larger files are refused before they are read (a photo is a few MB)."""
MAX_PIXELS = 50_000_000
"""Images with more pixels are refused from their header, before decoding."""


class ImageRefused(MlxchatError):
    """A file that cannot be shown to the model (one line: which and why)."""


@dataclass(frozen=True)
class Header:
    """What an image file says of itself before any pixel is decoded."""

    width: int
    height: int
    """As shown: swapped when the EXIF orientation turns it a quarter."""
    format: str
    mode: str
    frames: int


_TURNED = {5, 6, 7, 8}
"""EXIF orientations that turn the image a quarter (width and height swap)."""


def read_header(path: Path) -> Header:
    """The image's size and kind from its header; ImageRefused for a file that
    is missing, too large, not an image, animated or too many pixels."""
    from PIL import Image, UnidentifiedImageError

    name = path.name
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ImageRefused(f"no such image: {path}") from None
    if not path.is_file():
        raise ImageRefused(f"{name} is not a file")
    if size > MAX_FILE_BYTES:
        raise ImageRefused(f"{name} is {size / (1 << 20):.0f} MB; images up to "
                           f"{MAX_FILE_BYTES >> 20} MB are taken")
    try:
        with Image.open(path) as img:
            width, height = img.size
            frames = int(getattr(img, "n_frames", 1) or 1)
            orientation = _orientation(img, path)
            fmt, mode = img.format or "", img.mode
    except UnidentifiedImageError:
        raise ImageRefused(f"{name} is not an image this app can read") from None
    except Image.DecompressionBombError:
        width, height = _png_size(path)
        raise ImageRefused(f"{name} claims {width:,}x{height:,} pixels; images up to "
                           f"{MAX_PIXELS // 1_000_000} megapixels are taken") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageRefused(f"{name} cannot be read as an image: {_first_line(exc)}") from None
    if frames > 1:
        raise ImageRefused(f"{name} is animated ({frames} frames); give one frame as a "
                           "still image")
    if width * height > MAX_PIXELS:
        raise ImageRefused(f"{name} claims {width:,}x{height:,} pixels; images up to "
                           f"{MAX_PIXELS // 1_000_000} megapixels are taken")
    if orientation in _TURNED:
        width, height = height, width
    return Header(width, height, fmt, mode, frames)


def _orientation(img: Any, path: Path) -> int:
    """The EXIF orientation, no pixel decoded: PIL's PNG ``getexif`` decodes
    the whole image to look for an eXIf chunk after the pixel data."""
    if img.format == "PNG" and "exif" not in img.info:
        exif = _png_exif_chunk(path)
        if exif is None:
            return 1
        img.info["exif"] = exif
    return int(img.getexif().get(0x0112, 1))


def _png_exif_chunk(path: Path) -> bytes | None:
    """A PNG's eXIf data (as PIL keeps it), found by skipping from chunk to chunk."""
    with open(path, "rb") as fh:
        fh.seek(8)
        while len(head := fh.read(8)) == 8 and head[4:] != b"IEND":
            size = int.from_bytes(head[:4], "big")
            if head[4:] == b"eXIf":
                return b"Exif\x00\x00" + fh.read(size)
            fh.seek(size + 4, 1)  # the data and its CRC
    return None


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR (PIL refuses to open a huge one)."""
    with open(path, "rb") as fh:
        head = fh.read(24)
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def check(path: Path) -> Header:
    """Read the header and decode the whole image once: a file that would fail
    later fails now, before anything is stored or sent."""
    header = read_header(path)
    decode(path)
    return header


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]


def decode(path: Path) -> Any:
    """The image as 8-bit RGB, turned as its EXIF orientation says (a PIL image);
    ImageRefused when its data is damaged or cut short."""
    from PIL import Image, ImageOps

    header = read_header(path)
    try:
        with Image.open(path) as img:
            img.load()
            img = ImageOps.exif_transpose(img)
            rgb = _to_rgb(img)
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageRefused(f"{path.name} is damaged or cut short: {_first_line(exc)}") from None
    if rgb.size != (header.width, header.height):
        raise ImageRefused(f"{path.name} decodes to another size than its header says")
    return rgb


def _to_rgb(img: Any) -> Any:
    """8-bit RGB from any mode: 16-bit greys scaled (not clipped), alpha over white."""
    from PIL import Image

    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        wide = np.asarray(img, dtype=np.uint32)
        peak = 65535 if img.mode.startswith("I;16") or wide.max() > 255 else 255
        img = Image.fromarray((wide * 255 // peak).astype(np.uint8), "L")
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB")


def file_digest(path: Path) -> str:
    """sha256 of the file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def image_key(digest: str, settings: str) -> int:
    """The negative token id an image's placeholders take: its bytes and the
    processor's settings, hashed to 31 bits (int32 like every token id)."""
    h = hashlib.sha256(f"{digest}\n{settings}".encode()).digest()
    return -(1 + int.from_bytes(h[:4], "big") % (2**31 - 1))


@dataclass
class PreparedImage:
    """One image as the model will see it."""

    ref: ImageRef
    key: int
    """The negative id of its placeholder tokens."""
    grid: tuple[int, int, int]
    """Patches along time, height and width (before merging)."""
    merged: tuple[int, int]
    """Placeholder rows and columns: the grid after the merger."""
    pixels: Any = field(default=None, repr=False)
    """The processor's patches (a numpy array), decoded when first needed."""

    @property
    def tokens(self) -> int:
        return self.merged[0] * self.merged[1] * self.grid[0]
