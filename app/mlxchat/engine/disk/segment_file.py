"""Reading KV segment files: opened once, checked, never blocking.

Every reader of a segment or prefix file goes through ``open_file``: the file
is opened non-blocking and refused unless it is a regular file (a FIFO put in
its place never makes a read wait for a writer), and its safetensors header is
checked against the file's size before anything is allocated (a crafted
length or shape is refused in one line). ``SegmentReader`` then reads the file front
to back into buffers its caller chooses, feeding the checksum as it goes (on
``landing``'s threads when given one), so checking a file costs no second pass
over the disk.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from concurrent.futures import Future
from typing import Any, Callable

from mlxchat.engine.disk.checks import CacheFileRejected
from mlxchat.engine.disk.checksum import Hasher
from mlxchat.engine.disk.landing import Landing, read_at
from mlxchat.files import open_nonblocking

ITEMSIZE = {"F16": 2, "BF16": 2, "F32": 4, "U32": 4, "I32": 4, "U8": 1}
HEADER_LIMIT = 64 << 20
"""A header longer than this is damage (16k tokens of ids take about 100 KB)."""
_CHUNK = 8 << 20


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    """Offset of its first byte in the file."""
    end: int


@dataclass
class SegmentFile:
    """An open segment file whose header has been checked."""

    path: Path
    fd: int
    size: int
    head: bytes
    """The length and header bytes, as they are in the file."""
    meta: dict[str, str]
    tensors: list[Tensor]
    """In file order; together they cover the rest of the file exactly."""
    by_name: dict[str, Tensor] = field(default_factory=dict)

    def own(self) -> list[str]:
        """Its arrays in file order, without the checkpoints a joined file took
        inside it (``taken_at``)."""
        return [t.name for t in self.tensors if "@" not in t.name]

    def checkpoints(self) -> list[str]:
        """The checkpoints it keeps at its own end."""
        return [name for name in self.own() if not positional(name)]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def positional(name: str) -> bool:
    """A tensor of positions (``k.J``/``v.J``), as ``engine.layers`` names them."""
    parts = name.split(".")
    return len(parts) >= 3 and parts[-2] in ("k", "v")


def taken_at(name: str, end: int) -> str:
    """The name a joined file gives a checkpoint taken at ``end``, a position
    inside it: its own checkpoints (at its end) keep their plain names."""
    return f"{name}@{end}"


def plain(name: str) -> str:
    """A checkpoint's name without the position ``taken_at`` adds."""
    return name.split("@", 1)[0]


def kind(t: Tensor) -> tuple[Any, ...]:
    """What two files' arrays of positions must share to be one run: dtype,
    the leading dimensions and the last (all but the positions)."""
    return t.dtype, t.shape[:-2], t.shape[-1]


def span(meta: dict[str, str]) -> tuple[int, int, list[int]]:
    """A segment's (start, end, token ids) from its metadata."""
    try:
        return (int(meta["start"]), int(meta["end"]),
                [int(t) for t in json.loads(meta["tokens"])])
    except (KeyError, ValueError, TypeError):
        raise CacheFileRejected("damaged metadata") from None


def open_file(path: Path) -> SegmentFile:
    """The segment file at ``path`` opened with its header checked, or
    CacheFileRejected saying why not."""
    path = Path(path)
    try:
        fd = open_nonblocking(path)
    except FileNotFoundError:
        raise CacheFileRejected(f"file missing ({path.name})") from None
    except OSError as exc:
        raise CacheFileRejected(f"cannot open {path.name} ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CacheFileRejected(f"not a regular file ({path.name} is a pipe, device, "
                                   "socket or folder)")
        head, meta, tensors = _header(fd, info.st_size)
    except BaseException:
        os.close(fd)
        raise
    return SegmentFile(path, fd, info.st_size, head, meta, tensors,
                       {t.name: t for t in tensors})


def _read_exactly(fd: int, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        piece = os.read(fd, min(n - len(out), _CHUNK))
        if not piece:
            raise CacheFileRejected("damaged header (file too short)")
        out += piece
    return bytes(out)


def _header(fd: int, size: int) -> tuple[bytes, dict[str, str], list[Tensor]]:
    if size < 8:
        raise CacheFileRejected("damaged header (file too short)")
    first = _read_exactly(fd, 8)
    length = struct.unpack("<Q", first)[0]
    if length > min(size - 8, HEADER_LIMIT):
        raise CacheFileRejected(f"damaged header (a length of {length:,} bytes)")
    raw = _read_exactly(fd, length)
    try:
        header = json.loads(raw)
        meta = header.pop("__metadata__", {}) if isinstance(header, dict) else None
        tensors = sorted((_tensor(name, entry, 8 + length) for name, entry in header.items()),
                         key=lambda t: t.begin)
    except (ValueError, TypeError, KeyError, AttributeError):
        raise CacheFileRejected("damaged header") from None
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CacheFileRejected("damaged metadata")
    at = 8 + length
    for t in tensors:
        if t.begin != at:
            raise CacheFileRejected("damaged header (tensors overlap or leave gaps)")
        at = t.end
    if at != size:
        raise CacheFileRejected("damaged header (sizes do not add up to the file's)")
    return first + raw, meta, tensors


def _tensor(name: str, entry: dict[str, Any], base: int) -> Tensor:
    dtype, shape = entry["dtype"], entry["shape"]
    begin, end = entry["data_offsets"]
    if (dtype not in ITEMSIZE or not isinstance(shape, list) or not 0 < len(shape) <= 8
            or not all(isinstance(d, int) and d >= 0 for d in (*shape, begin, end))):
        raise ValueError(name)
    if math.prod(shape) * ITEMSIZE[dtype] != end - begin:
        raise ValueError(name)
    return Tensor(name, dtype, tuple(shape), base + begin, base + end)


class SegmentReader:
    """Reads one open file front to back, each byte once, into buffers the
    caller gives, and hashes every byte on the way (the algorithm ``like``, a
    stored checksum, names). Bytes the caller skips are read and hashed too;
    those of tensors named in ``keep`` are kept (small checkpoints). With a
    ``landing`` the reads run on its reader threads and the hashing, in file
    order, on its hashing thread: ``into`` returns once the read is under way."""

    def __init__(self, file: SegmentFile, like: str, keep: frozenset[str] = frozenset(),
                 landing: Landing | None = None):
        self.file, self._keep, self._landing = file, keep, landing
        self._hasher = Hasher(like)
        self._planned = len(file.head)
        """Where the next read starts: what is before it is read or under way."""
        self._damaged = False
        self.kept: dict[str, bytearray] = {}
        self._begins = [t.begin for t in file.tensors]
        self._hasher.update(file.head)

    def into(self, view: memoryview, offset: int) -> Future[int] | None:
        """Fill ``view`` with the file's bytes from ``offset`` (not before what
        was read already); with a landing, the read under way."""
        if offset < self._planned:
            raise ValueError("segment files are read front to back")
        gap, self._planned = (self._planned, offset), offset + len(view)
        if self._landing is None:
            self._skip(*gap)
            self._land(view, read_at(self.file.fd, view, offset))
            return None
        landed = self._landing.read(self.file.fd, view, offset)
        self._landing.then(lambda: self._guarded(lambda: (self._skip(*gap),
                                                          self._land(view, landed.result()))))
        return landed

    def _guarded(self, job: Callable[[], Any]) -> None:
        try:
            job()
        except Exception:  # noqa: BLE001 - an unreadable span fails the checksum
            self._damaged = True

    def _land(self, view: memoryview, got: int) -> None:
        if got < len(view):  # the file shrank since it was opened: its checksum fails
            self._damaged = True
        self._hasher.update(view)

    def _skip(self, at: int, end: int) -> None:
        scratch = None
        while at < end:
            t = self.file.tensors[bisect.bisect_right(self._begins, at) - 1]
            if t.name in self._keep and at == t.begin and t.end <= end:
                buf = memoryview(bytearray(t.end - t.begin))
                self._land(buf, read_at(self.file.fd, buf, at))
                self.kept[t.name] = buf.obj
                at = t.end
                continue
            scratch = scratch or bytearray(_CHUNK)
            piece = memoryview(scratch)[:min(end, t.end, at + _CHUNK) - at]
            self._land(piece, read_at(self.file.fd, piece, at))
            at += len(piece)

    def checksum(self) -> str:
        """The whole file's checksum, once the rest of it is read; "" if it
        could not be read whole."""
        gap, self._planned = (self._planned, self.file.size), self.file.size
        if self._landing is None:
            self._skip(*gap)
        else:
            self._landing.then(lambda: self._guarded(lambda: self._skip(*gap)))
            self._landing.wait()
        return "" if self._damaged else self._hasher.label()
