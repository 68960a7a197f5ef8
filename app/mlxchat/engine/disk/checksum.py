"""Checksums of KV cache files.

New files carry an XXH3-64 hash, written as ``xxh3:`` and 16 hex digits: it
hashes several times faster than the disk reads the file, so checking a long
history on resume costs little next to loading it. Files written before carry
a CRC-32 as 8 hex digits; each file is checked with the algorithm its stored
checksum names.
"""

from __future__ import annotations

import zlib

import xxhash

PREFIX = "xxh3:"


class Hasher:
    """The checksum of a file's bytes fed in order, by the algorithm ``like`` (a
    stored checksum) names: XXH3-64 for new files, CRC-32 for older ones."""

    def __init__(self, like: str = PREFIX) -> None:
        self._xxh = xxhash.xxh3_64() if like.startswith(PREFIX) else None
        self._crc = 0

    def update(self, data) -> None:
        if self._xxh is not None:
            self._xxh.update(data)
        else:
            self._crc = zlib.crc32(data, self._crc)

    def label(self) -> str:
        if self._xxh is not None:
            return PREFIX + self._xxh.hexdigest()
        return f"{self._crc:08x}"
