"""Bad image files: one line each, refused before anything is kept; the odd
but valid ones (CMYK, 16-bit, EXIF-rotated) are taken as they look."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from mlxchat.chat import ImageRef
from mlxchat.models.vision.images import ImageRefused, check, decode, file_digest, read_header

from .conftest import load


def png_header_only(path, width: int, height: int) -> None:
    """A PNG whose header claims ``width`` x ``height`` (a decompression bomb's shape)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                     + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def _refused(path) -> str:
    with pytest.raises(ImageRefused) as got:
        check(path)
    text = str(got.value)
    assert "\n" not in text and len(text) < 200
    return text


def test_not_an_image(tmp_path):
    (tmp_path / "notes.png").write_text("just text\n")
    assert "is not an image" in _refused(tmp_path / "notes.png")


def test_a_truncated_png(tmp_path):
    whole = tmp_path / "whole.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), np.uint8)).save(whole)
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole.read_bytes()[:400])
    assert "truncated" in _refused(cut)


def test_a_decompression_bomb_is_refused_by_its_header(tmp_path):
    bomb = tmp_path / "bomb.png"
    png_header_only(bomb, 20_000, 20_000)
    assert bomb.stat().st_size < 200
    assert "20,000x20,000 pixels" in _refused(bomb)


def test_a_200_mb_file_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.png"
    with open(big, "wb") as fh:
        fh.truncate(200 << 20)  # sparse: nothing written
    assert "200 MB" in _refused(big)


def test_an_animated_gif(tmp_path):
    frames = [Image.new("RGB", (16, 16), c) for c in ("red", "blue", "green")]
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:])
    assert "animated (3 frames)" in _refused(tmp_path / "a.gif")


def test_a_missing_path(tmp_path):
    assert "no such image" in _refused(tmp_path / "nowhere.png")
    assert "is not a file" in _refused(tmp_path)


def test_cmyk_and_16_bit_images_are_taken_as_rgb(tmp_path):
    Image.new("CMYK", (20, 10), (0, 255, 255, 0)).save(tmp_path / "cmyk.jpg")
    red = np.asarray(decode(tmp_path / "cmyk.jpg"))
    assert red.shape == (10, 20, 3) and red[..., 0].min() > 200 and red[..., 1:].max() < 60
    wide = (np.arange(20 * 10, dtype=np.uint16).reshape(10, 20) * 300)
    Image.fromarray(wide).save(tmp_path / "deep.png")
    assert Image.open(tmp_path / "deep.png").mode.startswith("I")
    grey = np.asarray(decode(tmp_path / "deep.png"))
    assert grey.shape == (10, 20, 3)
    assert grey[0, 0, 0] == 0 and grey[-1, -1, 0] == 199 * 300 * 255 // 65535


def test_exif_rotation_turns_the_image_and_its_grid(tmp_path, qwen_folder):
    img = Image.new("RGB", (100, 40), "white")
    exif = img.getexif()
    exif[0x0112] = 6  # rotated 90° clockwise: shown 40 wide, 100 tall
    img.save(tmp_path / "turned.jpg", exif=exif)
    assert (read_header(tmp_path / "turned.jpg").width,
            read_header(tmp_path / "turned.jpg").height) == (40, 100)
    assert decode(tmp_path / "turned.jpg").size == (40, 100)
    model = load(qwen_folder).model
    ref = ImageRef(file_digest(tmp_path / "turned.jpg"), str(tmp_path / "turned.jpg"))
    prepared = model.know([ref])[0]
    assert prepared.merged[0] > prepared.merged[1]  # taller than wide
    model.processor.pixels(prepared)  # the processor agrees with the header's grid


def test_a_refused_image_leaves_the_model_as_it_was(tmp_path, qwen_folder):
    model = load(qwen_folder).model
    (tmp_path / "x.png").write_text("no")
    ref = ImageRef(file_digest(tmp_path / "x.png"), str(tmp_path / "x.png"))
    with pytest.raises(ImageRefused):
        model.know([ref])
    assert model.known_images() == []
