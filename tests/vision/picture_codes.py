"""Decoders for what a terminal is sent to draw a picture, so tests read back
the image from the bytes: Kitty graphics protocol messages (PNG payloads in
base64 chunks, a placement by cells) and Sixel (a palette, six-pixel bands)."""

from __future__ import annotations

import base64
import io
import re
from dataclasses import dataclass

import numpy as np

_APC = re.compile(r"\x1b_G([^;\x1b]*)(?:;([^\x1b]*))?\x1b\\")


@dataclass
class KittyImage:
    png: bytes
    chunks: list[int]
    """The length of each base64 chunk, in the order sent."""
    columns: int
    rows: int
    """The placement, in cells."""


def kitty_images(written: str) -> list[KittyImage]:
    """Every image transmitted (``f=100``, PNG) and placed (``a=p``) in ``written``."""
    payloads: dict[str, list[str]] = {}
    placed: dict[str, tuple[int, int]] = {}
    for keys, payload in _APC.findall(written):
        fields = dict(kv.split("=", 1) for kv in keys.split(","))
        if fields.get("a") == "p":
            placed[fields["i"]] = (int(fields["c"]), int(fields["r"]))
        elif fields.get("f") == "100":
            payloads.setdefault(fields["i"], []).append(payload)
    return [KittyImage(base64.b64decode("".join(parts)), [len(p) for p in parts],
                       *placed[key]) for key, parts in payloads.items() if key in placed]


def png_pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def sixel_pixels(data: str) -> np.ndarray:
    """An (H, W, 3) uint8 image from one Sixel DCS string (raster size from
    its '"1;1;W;H' header, colours '#N;2;R;G;B' in percent)."""
    body = data[data.index("q") + 1: data.rindex("\x1b\\")]
    header = re.match(r'"1;1;(\d+);(\d+)', body)
    assert header is not None, "a Sixel picture states its size"
    width, height = int(header[1]), int(header[2])
    out = np.zeros((height, width, 3), np.uint8)
    palette: dict[int, tuple[int, int, int]] = {}
    colour = (0, 0, 0)
    x = band = 0
    tokens = re.finditer(r"#(\d+)(?:;2;(\d+);(\d+);(\d+))?|!(\d+)(.)|([?-~])|(\$)|(-)",
                         body[header.end():])
    for t in tokens:
        select, r, g, b, count, repeated, single, ret, newline = t.groups()
        if select is not None:
            if r is not None:
                palette[int(select)] = tuple(round(int(v) * 255 / 100) for v in (r, g, b))
            colour = palette[int(select)]
        elif ret:
            x = 0
        elif newline:
            x, band = 0, band + 1
        else:
            n, char = (int(count), repeated) if count else (1, single)
            bits = ord(char) - 63
            for dy in range(6):
                y = band * 6 + dy
                if bits >> dy & 1 and y < height:
                    out[y, x:x + n] = colour
            x += n
    return out
