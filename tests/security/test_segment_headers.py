"""A segment file's header is checked against the file before anything is
allocated or read: a crafted length or shape is refused in one line."""

from __future__ import annotations

import json
import struct

import pytest

from mlxchat.engine.disk import segment_file
from mlxchat.engine.disk.checks import CacheFileRejected


def _file(tmp_path, head: bytes, data: bytes = b""):
    path = tmp_path / "seg.safetensors"
    path.write_bytes(head + data)
    return path


def _header(entries: dict) -> bytes:
    raw = json.dumps(entries).encode()
    return struct.pack("<Q", len(raw)) + raw


def test_a_header_length_of_2_to_the_62_is_refused(tmp_path):
    path = _file(tmp_path, struct.pack("<Q", 1 << 62) + b"{}")
    with pytest.raises(CacheFileRejected, match=r"^damaged header \(a length of [\d,]+ bytes\)$"):
        segment_file.open_file(path)


def test_a_shape_of_2_to_the_46_elements_is_refused(tmp_path):
    entries = {"0.k.0": {"dtype": "F16", "shape": [1, 1 << 23, 1 << 23, 1],
                         "data_offsets": [0, 16]}}
    path = _file(tmp_path, _header(entries), bytes(16))
    with pytest.raises(CacheFileRejected, match="^damaged header$"):
        segment_file.open_file(path)
    entries["0.k.0"]["data_offsets"] = [0, 1 << 47]  # sizes agree, the file is too short
    path = _file(tmp_path, _header(entries), bytes(16))
    with pytest.raises(CacheFileRejected, match="do not add up to the file's"):
        segment_file.open_file(path)
