"""Pictures in the terminal: each way an image is drawn (Kitty graphics,
Sixel, half-blocks, the label alone) in the transcript and in /image's
preview, read back from what is sent to the terminal; the choice from the
setting, the terminal's variables and its replies."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from PIL import Image
from rich.console import Console
from textual.geometry import Region

from mlxchat.chat import ImageRef, Message
from mlxchat.config import ConfigError, load_settings
from mlxchat.tui.pictures import from_environment, kind_for
from mlxchat.tui.widgets import Transcript, UserMessage
from mlxchat.tui.widgets.picture import ImagePicture, decoded
from mlxchat.tui.widgets.thumbnail import ImageThumbnail

from tests.tui.app_support import ready, send, tiny_app
from tests.tui.tui_hosts import HostApp

from .conftest import make_image, ramp_image
from .picture_codes import kitty_images, png_pixels, sixel_pixels

CELL = (10, 20)
"""textual-image's cell size in pixels where no terminal tells it (as under pytest)."""


def scaled(ref: ImageRef, size: tuple[int, int]) -> np.ndarray:
    return np.asarray(Image.open(ref.path).convert("RGB").resize(size))


async def _picture_after_image_and_send(pilot, shot: ImageRef) -> tuple:
    """/image (its preview), then a message with it: the two widgets that show it."""
    await ready(pilot)
    await send(pilot, f"/image {shot.path}")
    preview = pilot.app.transcript.children[-1]
    await send(pilot, "What is it?")
    shown = pilot.app.transcript.query_one(UserMessage)
    return preview, shown.query_one("ImagePicture, ImageThumbnail")


async def test_kitty_sends_the_png_at_the_placement_size(tmp_path, tiny_vl, monkeypatch):
    shot = make_image(tmp_path / "shot.png", (100, 70), 5)
    terminal = io.StringIO()  # where textual-image writes Kitty messages
    monkeypatch.setattr(sys, "__stdout__", terminal)
    app = tiny_app(tmp_path / "s.db", tiny_vl)
    app.settings.images = "kitty"
    async with app.run_test(size=(120, 50)) as pilot:
        preview, shown = await _picture_after_image_and_send(pilot, shot)
        for widget in (preview, shown):
            assert isinstance(widget, ImagePicture) and widget.kind == "kitty"
            assert widget.query_one(".picture-label").render().plain.startswith(
                "▣ shot.png · 100x70")
        # A picture is sent when it is painted, which is when it is in view (the
        # reply may push it out first): each is painted here as the screen would,
        # its renderable (sized by the widget's styles) drawn on a console.
        for widget in (preview, shown):
            Console(file=io.StringIO(), width=120, height=50).print(
                widget.query_one(".picture").render())
    sent = kitty_images(terminal.getvalue())
    assert len(sent) >= 2  # the preview's and the message's, and any painted before
    for image in sent:
        assert max(image.chunks) <= 4096 and all(c == 4096 for c in image.chunks[:-1])
        pixels = png_pixels(image.png)
        size = (image.columns * CELL[0], image.rows * CELL[1])
        assert image.columns == 24 and (pixels.shape[1], pixels.shape[0]) == size
        assert np.array_equal(pixels, scaled(shot, size))


async def test_sixel_draws_the_palette_image_of_the_picture(tmp_path, tiny_vl):
    shot = make_image(tmp_path / "shot.png", (100, 70), 6)
    app = tiny_app(tmp_path / "s.db", tiny_vl)
    app.settings.images = "sixel"
    async with app.run_test(size=(120, 50)) as pilot:
        preview, shown = await _picture_after_image_and_send(pilot, shot)
        for widget in (preview, shown):
            assert isinstance(widget, ImagePicture) and widget.kind == "sixel"
        await pilot.pause()
        drawn = shown.query_one(".picture")
        cells = drawn.content_region
        impl = drawn.children[0]
        lines = impl.render_lines(Region(0, 0, cells.width, cells.height))
    assert len(lines) == cells.height == round(24 * CELL[0] * 70 / 100 / CELL[1])
    codes = "".join(seg.text for seg in lines[-1])  # the picture rides on the last line
    assert codes.count("\x1bP") == 1
    pixels = sixel_pixels(codes)
    size = (cells.width * CELL[0], cells.height * CELL[1])
    assert (pixels.shape[1], pixels.shape[0]) == size
    error = np.abs(pixels.astype(int) - scaled(shot, size).astype(int)).mean()
    assert error < 40, error  # a 256-colour palette of random noise: near, not equal
    assert error < np.abs(pixels.astype(int) - 128).mean()  # and no flat grey


async def test_halfblocks_where_the_terminal_draws_no_pictures(tmp_path, tiny_vl):
    shot = make_image(tmp_path / "shot.png", (100, 70), 7)
    app = tiny_app(tmp_path / "s.db", tiny_vl)
    assert app.settings.images == "auto"  # nothing probed under pytest: half-blocks
    async with app.run_test(size=(120, 50)) as pilot:
        preview, shown = await _picture_after_image_and_send(pilot, shot)
        for widget in (preview, shown):
            assert isinstance(widget, ImageThumbnail) and widget.drawn
            rendered = widget.render().plain.splitlines()
            assert rendered[0] == "▀" * 24 and len(rendered) == 1 + 8


async def test_the_label_alone_when_asked(tmp_path, tiny_vl):
    shot = make_image(tmp_path / "shot.png", (100, 70), 8)
    app = tiny_app(tmp_path / "s.db", tiny_vl)
    app.settings.images = "label"
    async with app.run_test(size=(120, 50)) as pilot:
        preview, shown = await _picture_after_image_and_send(pilot, shot)
        for widget in (preview, shown):
            assert isinstance(widget, ImageThumbnail) and not widget.drawn
            assert widget.render().plain.startswith("▣ shot.png · 100x70 · ")
            assert "\n" not in widget.render().plain


async def test_a_file_gone_shows_the_label_even_where_pictures_draw(tmp_path):
    shot = make_image(tmp_path / "gone.png", (40, 40), 9)
    (tmp_path / "gone.png").unlink()
    assert decoded(shot) is None
    app = HostApp(lambda: Transcript())
    async with app.run_test(size=(60, 20)) as pilot:
        app.settings = load_settings(tmp_path / "none.toml", env=False)
        app.settings.images = "kitty"
        await app.query_one(Transcript).load([Message("user", "and?", images=(shot,))])
        await pilot.pause()
        thumb = app.query_one(ImageThumbnail)
        assert not thumb.drawn and thumb.render().plain.endswith("· file gone")


def _transcript_snapshot(snap_compare, tmp_path, mode: str) -> bool:
    ref = ramp_image(tmp_path)

    async def run_before(pilot):
        pilot.app.settings = load_settings(tmp_path / "none.toml", env=False)
        pilot.app.settings.images = mode
        await pilot.app.query_one(Transcript).load(
            [Message("user", "What colours are these?", images=(ref,))])
        await pilot.pause()

    return snap_compare(HostApp(lambda: Transcript()), terminal_size=(60, 20),
                        run_before=run_before)


def test_label_snapshot(snap_compare, tmp_path):
    # The half-block one is test_vision_app's; a Kitty or Sixel picture is
    # escape codes an SVG cannot hold: read back by the tests above instead.
    assert _transcript_snapshot(snap_compare, tmp_path, "label")


def test_the_setting_and_the_colours_choose_the_way():
    assert kind_for("auto", colour=True, probed="sixel") == "sixel"
    assert kind_for("auto", colour=True, probed="kitty") == "kitty"
    assert kind_for("auto", colour=True, probed=None) == "halfblock"
    assert kind_for("auto", colour=False, probed="kitty") == "label"
    assert kind_for("halfblock", colour=True, probed="kitty") == "halfblock"
    assert kind_for("halfblock", colour=False) == "label"
    assert kind_for("kitty", colour=True) == "kitty"
    assert kind_for("sixel", colour=False) == "sixel"  # forced: the user knows the terminal
    assert kind_for("label", colour=True, probed="sixel") == "label"


@pytest.mark.parametrize(("env", "kind"), [
    ({"TERM": "xterm-kitty", "KITTY_WINDOW_ID": "1"}, "kitty"),
    ({"TERM": "xterm-ghostty", "TERM_PROGRAM": "ghostty"}, "kitty"),
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "WezTerm"}, "sixel"),
    ({"TERM": "xterm-256color", "TERM_PROGRAM": "iTerm.app"}, "sixel"),
    ({"TERM": "foot"}, "sixel"),
    ({"TERM": "xterm-256color"}, None),
    ({"TERM": "tmux-256color", "TMUX": "/tmp/t,1,0", "KITTY_WINDOW_ID": "1"}, None),
    ({"TERM": "screen", "STY": "1.pts", "TERM_PROGRAM": "WezTerm"}, None),
])
def test_the_terminals_variables_name_its_protocol(env, kind):
    assert from_environment(env) == kind


def test_a_bad_images_setting_is_one_line(tmp_path, monkeypatch):
    config = tmp_path / "config.toml"
    config.write_text('images = "pixels"\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(config, env=False)
    assert str(raised.value) == ("images = 'pixels': choose one of auto, kitty, sixel, "
                                 "halfblock, label")
    monkeypatch.setenv("MLXCHAT_IMAGES", "sixel")
    config.write_text("")
    assert load_settings(config).images == "sixel"
