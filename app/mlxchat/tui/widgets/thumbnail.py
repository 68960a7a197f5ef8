"""An image in the transcript: a thumbnail in half-block characters (each
cell two pixels, the upper one's colour as the foreground of '▀', the lower
one's as its background), with a one-line label under it; the label alone
where the image cannot be drawn (a terminal without colours, a file gone,
``images = "label"``). Terminals that draw real pictures get ``picture.py``'s."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.style import Style
from rich.text import Text
from textual.widgets import Static

from mlxchat.chat import ImageRef, human_bytes
from mlxchat.errors import MlxchatError

COLUMNS = 24
"""Thumbnail width in cells; its height follows the image (two pixels a cell)."""


def label(ref: ImageRef) -> str:
    size = f" · {ref.width}x{ref.height}" if ref.width and ref.height else ""
    path = Path(ref.path)
    kept = f" · {human_bytes(path.stat().st_size)}" if path.is_file() else " · file gone"
    return f"▣ {ref.name or ref.digest[:12]}{size}{kept}"


def half_blocks(rgb: np.ndarray) -> Text:
    """Cells for an (H, W, 3) uint8 array with an even H: two pixel rows a line."""
    out = Text(no_wrap=True, overflow="crop")
    for y in range(0, rgb.shape[0], 2):
        for x in range(rgb.shape[1]):
            top, low = rgb[y, x], rgb[y + 1, x]
            out.append("▀", Style(color=f"rgb({top[0]},{top[1]},{top[2]})",
                                  bgcolor=f"rgb({low[0]},{low[1]},{low[2]})"))
        out.append("\n")
    return out


def thumbnail(ref: ImageRef, columns: int = COLUMNS) -> np.ndarray | None:
    """The image scaled to ``columns`` pixels wide (an even height), or None
    when it cannot be read."""
    from PIL import Image

    from mlxchat.models.vision.images import decode

    try:
        img = decode(Path(ref.path))
    except (MlxchatError, OSError):
        return None
    w, h = img.size
    rows = max(2, round(h / w * columns / 2) * 2)
    return np.asarray(img.resize((columns, rows), Image.Resampling.BILINEAR))


class ImageThumbnail(Static):
    """One image a message shows."""

    def __init__(self, ref: ImageRef, *, columns: int = COLUMNS, blocks: bool = True) -> None:
        super().__init__(classes="image-thumbnail")
        self.ref = ref
        self.columns = columns
        self.blocks = blocks
        """False: the label alone, as asked."""
        self.drawn = False
        """True when the thumbnail was drawn, False when only the label shows."""

    def on_mount(self) -> None:
        text = Text(label(self.ref), style="dim")
        drawable = self.blocks and self.app.console.color_system
        pixels = thumbnail(self.ref, self.columns) if drawable else None
        if pixels is not None:
            self.drawn = True
            text = half_blocks(pixels) + text
        self.update(text)
