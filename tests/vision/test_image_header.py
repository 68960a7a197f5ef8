"""An image's header read without decoding its pixels (what a resumed turn
reads of every image in the history): a PNG's orientation comes from its
eXIf chunk wherever it lies, found by skipping the pixel data."""

from __future__ import annotations

import struct
import zlib

from PIL import Image

from mlxchat.models.vision.images import decode, read_header

from .test_bad_images import png_header_only


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def test_a_png_header_is_read_without_its_pixels(tmp_path):
    # Pixel data far too short for 64x64: decoding it fails, its header does not.
    short = tmp_path / "short.png"
    png_header_only(short, 64, 48)
    header = read_header(short)
    assert (header.width, header.height, header.format) == (64, 48, "PNG")


def test_a_png_turned_by_an_exif_chunk_after_its_pixels(tmp_path):
    img = Image.new("RGB", (100, 40), "white")
    exif = img.getexif()
    exif[0x0112] = 6  # rotated 90° clockwise: shown 40 wide, 100 tall
    img.save(tmp_path / "plain.png")
    data = (tmp_path / "plain.png").read_bytes()
    iend = data.rindex(b"IEND") - 4
    late = tmp_path / "late.png"  # the eXIf chunk after IDAT, where PIL looks only on load
    late.write_bytes(data[:iend] + chunk(b"eXIf", exif.tobytes()[6:]) + data[iend:])
    assert (read_header(late).width, read_header(late).height) == (40, 100)
    assert decode(late).size == (40, 100)
    early = tmp_path / "early.png"
    img.save(early, exif=exif)
    assert (read_header(early).width, read_header(early).height) == (40, 100)
    assert (read_header(tmp_path / "plain.png").width, decode(tmp_path / "plain.png").size) == (
        100, (100, 40))
