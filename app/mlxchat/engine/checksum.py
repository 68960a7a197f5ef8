"""Checksums of KV cache files.

New files carry an XXH3-64 hash, written as ``xxh3:`` and 16 hex digits: it
hashes several times faster than the disk reads the file, so checking a long
history on resume costs little next to loading it. Files written before carry
a CRC-32 as 8 hex digits; each file is checked with the algorithm its stored
checksum names.
"""

from __future__ import annotations

import xxhash

PREFIX = "xxh3:"


class Hasher:
    """The checksum of a file being written, fed its bytes in order."""

    def __init__(self) -> None:
        self._h = xxhash.xxh3_64()

    def update(self, data) -> None:
        self._h.update(data)

    def label(self) -> str:
        return PREFIX + self._h.hexdigest()
