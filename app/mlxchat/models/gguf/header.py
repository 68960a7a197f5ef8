"""Read a GGUF file with llama.cpp's own reader (the ``gguf`` package).

A thin wrapper: the header, metadata and tensor table come from
``gguf.GGUFReader`` (memory-mapped: no tensor is read until it is asked for),
and every way a file can be bad becomes one ``ModelError`` line that says why
(not a GGUF, an old version, truncated or damaged, a type or an architecture
we do not import) before any weight is converted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlxchat.models.errors import ModelError

MAGIC = b"GGUF"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    """Row-major (numpy/MLX) order: GGUF lists dimensions innermost first."""
    type_name: str
    """ggml's name for the type: 'Q4_K', 'F16', ..."""
    data: Any = field(repr=False, compare=False, default=None)
    """The bytes (or F32/F16 values) in the file, memory-mapped, as the reader gives them."""

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes) if self.data is not None else 0


@dataclass
class GGUFHeader:
    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo] = field(default_factory=list)
    file_size: int = 0

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    def tensor(self, name: str) -> TensorInfo | None:
        return next((t for t in self.tensors if t.name == name), None)

    def arch_value(self, key: str, default: Any = None) -> Any:
        """``{architecture}.{key}`` from the metadata."""
        return self.metadata.get(f"{self.architecture}.{key}", default)


def _check_start(path: Path) -> int:
    """Size of ``path``; raises on a missing file, a wrong magic or an unknown version."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            start = fh.read(8)
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    if start[:4] != MAGIC:
        raise ModelError(f"not a GGUF file: {path}")
    if len(start) < 8:
        raise ModelError(f"truncated GGUF: {path} ends inside its header ({size} bytes)")
    version = struct.unpack("<I", start[4:])[0]
    if version not in (2, 3):
        raise ModelError(f"GGUF version {version} is not supported (only 2 and 3): {path}")
    return size


def _value(f: Any) -> Any:
    value = f.contents()
    return value.item() if isinstance(value, np.generic) else value


def _reader_class():
    """gguf.GGUFReader reading through a plain ndarray view of its memory map.

    Slicing an ``np.memmap`` makes a memmap object each time, and the reader
    slices once per vocabulary string: 2.5 s of a 3 s parse for a 49k-token
    vocabulary (measured). A plain view of the same mapping is still zero-copy.
    ``_get`` is the pinned gguf version's own code, on that view.

    Arrays are read whole: the reader made two numpy views per string of an
    array (Gemma 3's 262k-token vocabulary: 786k parts, 11 s of a 12 s
    parse); here a string is one memoryview slice and an array of numbers
    one view, which ``ReaderField.contents`` reads the same way.
    """
    import gguf

    array, string = gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING

    class Reader(gguf.GGUFReader):
        def _plain(self) -> np.ndarray:
            plain = self.__dict__.get("_plain_view")
            if plain is None:
                plain = self.__dict__["_plain_view"] = self.data.view(np.ndarray)
            return plain

        def _get(self, offset, dtype, count=1, override_order=None):
            count = int(count)
            end = offset + int(np.dtype(dtype).itemsize) * count
            arr = self._plain()[offset:end].view(dtype=dtype)[:count]
            order = self.byte_order if override_order is None else override_order
            return arr.view(arr.dtype.newbyteorder(order))

        def _get_field_parts(self, orig_offs, raw_type):
            if raw_type != array or self.byte_order != "I":
                return super()._get_field_parts(orig_offs, raw_type)
            raw_itype = self._get(orig_offs, np.uint32)
            alen = self._get(orig_offs + 4, np.uint64)
            if len(raw_itype) != 1 or len(alen) != 1:
                raise ValueError("truncated array")
            itype, count, offs = gguf.GGUFValueType(raw_itype[0]), int(alen[0]), orig_offs + 12
            if itype == string:
                view, parts = memoryview(self._plain()), [raw_itype, alen]
                try:
                    for _ in range(count):  # each string moves on 8 bytes or more: bounded
                        (n,) = struct.unpack_from("=Q", view, offs)
                        if offs + 8 + n > len(view):
                            raise ValueError("truncated string")
                        parts.append(view[offs + 8:offs + 8 + n])
                        offs += 8 + n
                except struct.error:
                    raise ValueError("truncated string array") from None
                return offs - orig_offs, parts, list(range(2, 2 + count)), [array, string]
            nptype = self.gguf_scalar_to_np.get(itype)
            if nptype is None:  # arrays of arrays: the reader's own way
                return super()._get_field_parts(orig_offs, raw_type)
            values = self._get(offs, nptype, count)
            if len(values) != count:
                raise ValueError("truncated array")
            return 12 + int(values.nbytes), [raw_itype, alen, values], [2], [array, itype]

    return Reader


def read_header(path: Path) -> GGUFHeader:
    """Parse a GGUF file (memory-mapped); raise ModelError with one line on a bad file."""
    path = Path(path)
    size = _check_start(path)
    try:
        reader = _reader_class()(path)
        metadata = {k: _value(f) for k, f in reader.fields.items()
                    if not k.startswith("GGUF.")}
        tensors = [TensorInfo(t.name, tuple(int(d) for d in reversed(t.shape.tolist())),
                              t.tensor_type.name, t.data) for t in reader.tensors]
    except (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError,
            TypeError, MemoryError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise ModelError(f"truncated or damaged GGUF: {path} ({size} bytes): {reason}") from None
    version = int(reader.fields["GGUF.version"].parts[-1][0])
    return GGUFHeader(path, version, metadata, tensors, size)
