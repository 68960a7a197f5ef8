"""A GGUF's header without its arrays: what `mlxchat models --scan` shows.

``gguf.GGUFReader`` builds every metadata array, the vocabulary's hundreds of
thousands of strings included (about 1.3 s a file). A scan needs the scalars,
which array keys exist, and the tensor table: here the arrays are stepped over
(their strings' lengths read, nothing decoded) and kept as ``SkippedArray``.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from mlxchat.models.errors import ModelError
from mlxchat.models.gguf.header import GGUFHeader, TensorInfo, _check_start

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class SkippedArray:
    """A metadata array stepped over: its item type and length only."""

    item_type: int
    count: int

    def __len__(self) -> int:
        return self.count


class _Cursor:
    def __init__(self, data: mmap.mmap | bytes, at: int):
        self.data, self.at = data, at

    def take(self, fmt: str):
        value = struct.unpack_from(fmt, self.data, self.at)[0]
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("<Q")
        if self.at + n > len(self.data):
            raise ValueError("string runs past the end of the file")
        text = bytes(self.data[self.at:self.at + n]).decode("utf-8")
        self.at += n
        return text

    def skip_array(self) -> SkippedArray:
        item, count = self.take("<I"), self.take("<Q")
        if item == _STRING:
            for _ in range(count):  # lengths only: no string is decoded
                self.at += 8 + struct.unpack_from("<Q", self.data, self.at)[0]
        elif item in _SCALARS:
            self.at += struct.calcsize(_SCALARS[item]) * count
        else:
            raise ValueError(f"array of type {item}")
        if self.at > len(self.data):
            raise ValueError("array runs past the end of the file")
        return SkippedArray(item, count)

    def value(self, vtype: int):
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            return self.skip_array()
        if vtype not in _SCALARS:
            raise ValueError(f"value of type {vtype}")
        return self.take(_SCALARS[vtype])


def _tensor(cur: _Cursor) -> TensorInfo:
    import gguf

    name = cur.string()
    dims = [cur.take("<Q") for _ in range(cur.take("<I"))]
    kind = cur.take("<I")
    cur.take("<Q")  # offset: no data is read
    try:
        type_name = gguf.GGMLQuantizationType(kind).name
    except ValueError:
        type_name = f"type {kind}"
    return TensorInfo(name, tuple(int(d) for d in reversed(dims)), type_name)


def read_summary(path: Path) -> GGUFHeader:
    """The header of ``path`` with arrays as SkippedArray and tensors without data."""
    path = Path(path)
    size = _check_start(path)
    try:
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            cur = _Cursor(data, 4)
            version, n_tensors, n_kv = cur.take("<I"), cur.take("<Q"), cur.take("<Q")
            metadata = {}
            for _ in range(n_kv):
                key = cur.string()
                metadata[key] = cur.value(cur.take("<I"))
            tensors = [_tensor(cur) for _ in range(n_tensors)]
    except (ValueError, struct.error, UnicodeDecodeError, OverflowError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise ModelError(f"truncated or damaged GGUF: {path} ({size} bytes): {reason}") from None
    return GGUFHeader(path, version, metadata, tensors, size)
