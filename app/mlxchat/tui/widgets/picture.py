"""An image as the transcript and /image's preview show it: the real picture
(Kitty graphics protocol or Sixel, drawn by ``textual-image``) with its label
under it where the terminal draws pictures, the half-block thumbnail
elsewhere, the label alone without colours or when the file cannot be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Static

from mlxchat.chat import ImageRef
from mlxchat.errors import MlxchatError
from mlxchat.tui.pictures import Kind, kind_for, quiet_textual_image
from mlxchat.tui.widgets.thumbnail import COLUMNS, ImageThumbnail, label

LARGEST = 1024
"""Pixels on the longer side kept for drawing: a cell is ~10x20 pixels and a
picture 24 cells wide, so more is never shown, only sent."""


def decoded(ref: ImageRef) -> Any | None:
    """The image as a PIL image no larger than ``LARGEST``, or None when it cannot be read."""
    from mlxchat.models.vision.images import decode

    try:
        img = decode(Path(ref.path))
    except (MlxchatError, OSError):
        return None
    img.thumbnail((LARGEST, LARGEST))
    return img


class ImagePicture(Vertical):
    """The real picture, ``COLUMNS`` cells wide, with its label under it."""

    def __init__(self, ref: ImageRef, kind: Kind, image: Any) -> None:
        super().__init__(classes="image-picture")
        self.ref = ref
        self.kind = kind
        self.image = image
        self.drawn = True

    def compose(self) -> ComposeResult:
        quiet_textual_image()  # Textual reads stdin now: a reply would land in the input
        from textual_image.widget import SixelImage, TGPImage

        picture = TGPImage if self.kind == "kitty" else SixelImage
        yield picture(self.image, classes="picture")
        yield Static(Text(label(self.ref), style="dim"), classes="picture-label")


def image_kind(app: App) -> Kind:
    """How ``app`` draws images: its setting, what the terminal answered, its colours."""
    settings = getattr(app, "settings", None)
    return kind_for(getattr(settings, "images", "auto"), colour=bool(app.console.color_system))


def image_view(ref: ImageRef, app: App, *, columns: int = COLUMNS) -> Widget:
    """The widget that shows ``ref`` in ``app``."""
    kind = image_kind(app)
    if kind in ("kitty", "sixel"):
        image = decoded(ref)
        if image is not None:
            return ImagePicture(ref, kind, image)
    return ImageThumbnail(ref, columns=columns, blocks=kind == "halfblock")
