"""Fresh memory a restore fills is made present in one call on Linux (the
kernel's own count of resident pages says so), and left alone elsewhere."""

from __future__ import annotations

import ctypes
import mmap
import sys

import pytest

from mlxchat.engine.disk import prefault


def resident_kib(buf: mmap.mmap) -> int:
    """The Rss /proc/self/smaps gives the mapping that holds ``buf``."""
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    with open("/proc/self/smaps") as fh:
        inside = False
        for line in fh:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError("mapping not found")


@pytest.mark.skipif(sys.platform != "linux", reason="MADV_POPULATE_WRITE is Linux's")
def test_populating_makes_every_page_present_and_keeps_the_bytes():
    size = 8 << 20
    buf = mmap.mmap(-1, size)
    buf[:5] = b"kept!"
    assert resident_kib(buf) < 1024  # untouched: almost nothing present yet
    assert prefault.populate(memoryview(buf))
    assert resident_kib(buf) >= size // 1024 - 8
    assert buf[:5] == b"kept!" and buf[size - 1] == 0


def test_small_or_read_only_views_are_left_alone():
    assert not prefault.populate(memoryview(bytearray(4096)))
    assert not prefault.populate(memoryview(bytes(4 << 20)))
