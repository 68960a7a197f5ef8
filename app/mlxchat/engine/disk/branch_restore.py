"""A branch's KV segments back into a live cache, at the speed of the disk.

Every file is opened and its header checked first (``segment_file``). Then
each array that keeps positions (keys, values, their scales) is allocated
once at the branch's whole length and filled straight from the files, each
file read front to back exactly once with its checksum computed on the same
bytes: there is no join pass and no second pass for the check. MLX allocates
the array and asks for its bytes through a file-like object (``_Joined``)
that stands for the joined tensor, so nothing is zeroed or copied first;
the reads it asks for land on a few threads and the checksums run on another,
in each file's order, on the bytes as they land (``landing``).

Layers that keep a checkpoint (recurrent states) restore from the last
file's: its own at its end, or one a joined file took inside it where the
branch ends (``joiner``). Sliding-window and chunked layers are composed from
the rows each file kept of them (``window_rows``), a format-1 file's whole
buffer read as the rows it holds.

A file whose header is refused stops the restore there; one whose checksum
then fails drops its positions and every one after it (they are beyond the
restored length). The tokens before are kept, the rest recomputed.
"""

from __future__ import annotations

import bisect
import io
import json
import struct
from dataclasses import dataclass
from typing import Any, Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.engine.disk import segment_file, segments, window_rows
from mlxchat.engine.disk.landing import Landing
from mlxchat.engine.disk.checks import CacheFileRejected
from mlxchat.engine.disk.segment_file import SegmentFile, SegmentReader, Tensor, kind, positional
from mlxchat.engine.disk.segments import SegmentRef
from mlxchat.engine.kv import layers

STEP = 256
"""Positions are allocated in mlx-lm's steps, so the next turn's tokens
usually fit without copying the cache."""


@dataclass
class Restored:
    layers: list[Any] | None
    """The cache (None when no segment could be used)."""
    end: int
    """Tokens it holds: those of the first ``used`` segments."""
    used: int
    reason: str | None
    """Why the restore stopped before the last segment, or None."""


@dataclass
class _Group:
    """Consecutive references into one file (a compacted file holds many)."""

    first: int
    """Index of its first reference."""
    refs: list[SegmentRef]
    file: SegmentFile
    layers: list[dict[str, Any]]
    """The layers as they are where the group ends."""
    taken: str = ""
    """What the names of the checkpoints it restores from end with: "" for the
    file's own (at its end), ``@END`` for one a joined file took inside it."""

    @property
    def start(self) -> int:
        return self.refs[0].start

    @property
    def end(self) -> int:
        return self.refs[-1].end


def restore(model: Any, refs: Sequence[SegmentRef], *, fingerprint: str,
            template_hash: str) -> Restored:
    groups: list[_Group] = []
    landing = Landing()
    try:
        reason = _open_groups(refs, groups, fingerprint=fingerprint,
                              template_hash=template_hash)
        if not groups:
            return Restored(None, 0, 0, reason)
        fresh = make_prompt_cache(model)
        problem = _fits(groups[0].layers, fresh)
        if problem:
            return Restored(None, 0, 0, f"segment 1 of {len(refs)}: {problem}")
        readers, arrays = _read(groups, landing)
        good = next((i for i, (g, r) in enumerate(zip(groups, readers))
                     if r.checksum() != g.refs[0].checksum), len(groups))
        if good < len(groups):
            reason = (f"segment {groups[good].first + 1} of {len(refs)}: checksum mismatch "
                      "(file changed or damaged)")
        if not good:
            return Restored(None, 0, 0, reason)
        last = groups[good - 1]
        try:
            cache = _layers(groups[:good], readers[:good], arrays, fresh)
        except CacheFileRejected as exc:
            return Restored(None, 0, 0, f"segment {last.first + 1} of {len(refs)}: {exc}")
        return Restored(cache, last.end, last.first + len(last.refs), reason)
    finally:
        landing.close()  # its threads done with the files before they close
        for g in groups:
            g.file.close()


def _open_groups(refs: Sequence[SegmentRef], groups: list[_Group], *, fingerprint: str,
                 template_hash: str) -> str | None:
    """Open and check the files of ``refs`` in order into ``groups``; the reason
    the first one refused was, or None."""
    n = 0
    while n < len(refs):
        ref = refs[n]
        try:
            if ref.start != (refs[n - 1].end if n else 0):
                raise CacheFileRejected("it does not continue the one before")
            file = segment_file.open_file(ref.path)
            try:
                group = _group(file, refs, n, fingerprint, template_hash)
                if groups:
                    _agrees(groups[0], group)
            except CacheFileRejected:
                file.close()
                raise
        except CacheFileRejected as exc:
            return f"segment {n + 1} of {len(refs)}: {exc}"
        groups.append(group)
        n += len(group.refs)
    return None


def _group(file: SegmentFile, refs: Sequence[SegmentRef], n: int, fingerprint: str,
           template_hash: str) -> _Group:
    meta = file.meta
    problem = segments.origin_problem(meta, fingerprint=fingerprint,
                                      template_hash=template_hash)
    if problem:
        raise CacheFileRejected(problem)
    start, end, tokens = segment_file.span(meta)
    try:
        described = json.loads(meta["layers"])
    except (KeyError, ValueError, TypeError):
        raise CacheFileRejected("damaged metadata") from None
    mine = [refs[n]]
    while (n + len(mine) < len(refs) and refs[n + len(mine)].path == file.path
           and refs[n + len(mine)].checksum == refs[n].checksum):
        mine.append(refs[n + len(mine)])
    held = [t for r in mine for t in r.token_ids]
    if (start != mine[0].start or not mine[-1].end <= end or len(tokens) != end - start
            or tokens[:len(held)] != held or len(held) != mine[-1].end - start):
        raise CacheFileRejected("holds other tokens than the conversation")
    taken = ""
    if mine[-1].end < end and file.checkpoints():
        described, taken = _taken_inside(file, mine[-1].end)
    if not isinstance(described, list):
        raise CacheFileRejected("damaged metadata")
    for t in file.tensors:
        if positional(t.name) and (len(t.shape) < 2 or t.shape[-2] != end - start):
            raise CacheFileRejected("damaged header (a length that is not the span's)")
    return _Group(n, mine, file, described, taken)


def _taken_inside(file: SegmentFile, end: int) -> tuple[Any, str]:
    """The layers' description and the name ending of the checkpoints a joined
    file took at ``end``; CacheFileRejected when it holds none there."""
    try:
        described = json.loads(file.meta.get("checkpoints", "{}")).get(str(end))
    except (ValueError, AttributeError):
        raise CacheFileRejected("damaged metadata") from None
    taken = segment_file.taken_at("", end)
    if described is None or any(name + taken not in file.by_name
                                for name in file.checkpoints()):
        raise CacheFileRejected("holds no checkpoint where the branch ends")
    return described, taken


def _agrees(first: _Group, later: _Group) -> None:
    """Consecutive files must describe the same layers with the same arrays."""
    if [layers.layout(m) for m in first.layers] != [layers.layout(m) for m in later.layers]:
        raise CacheFileRejected("the KV bit width changed")
    mine, theirs = first.file.by_name, later.file.by_name
    own = first.file.own()
    if _as_checkpoints(own) != _as_checkpoints(later.file.own()) or any(
            positional(name) and kind(mine[name]) != kind(theirs[name]) for name in own):
        raise CacheFileRejected("its arrays do not match the segment before")


def _as_checkpoints(names: list[str]) -> list[str]:
    """Names with a window's rows (format 2) named as its whole checkpoint
    (format 1): a branch may go on from older files."""
    return [name.replace(".w.", ".s.") if window_rows.is_rows(name) else name
            for name in names]


def _fits(described: list[dict[str, Any]], fresh: list[Any]) -> str | None:
    if len(described) != len(fresh):
        return "layer count does not match the model"
    if any(layers.restoring(m, c) is None for m, c in zip(described, fresh)):
        return "cache types do not match the model"
    return None


def _read(groups: list[_Group], landing: Landing
          ) -> tuple[list[SegmentReader], dict[str, mx.array]]:
    """Every array of positions at the branch's whole length, each file read
    once; the readers then hold the checkpoints and give the checksums."""
    readers = [SegmentReader(g.file, g.refs[0].checksum, _kept(g), landing) for g in groups]
    length = groups[-1].end
    arrays: dict[str, mx.array] = {}
    try:
        for t in groups[0].file.tensors:
            if positional(t.name):
                arrays[t.name] = _joined(t, groups, readers, length)
                mx.eval(arrays[t.name])  # MLX allocates it and asks for its bytes
    finally:
        landing.settle()  # the arrays are kept, and not read, until their bytes landed
    return readers, arrays


def _kept(g: _Group) -> frozenset[str]:
    """What a group's reader keeps: its checkpoints where the branch ends, and
    every window row it holds up to there."""
    end = int(g.file.meta["end"])
    names = set()
    for name in g.file.checkpoints() + [t.name for t in g.file.tensors if "@" in t.name]:
        base, _, at = name.partition("@")
        if window_rows.is_rows(name):
            if (int(at) if at else end) <= g.end:
                names.add(name)
        elif name == base + g.taken:
            names.add(name)
    return frozenset(names)


def _layers(used: list[_Group], readers: list[SegmentReader], arrays: dict[str, mx.array],
            fresh: list[Any]) -> list[Any]:
    """The live layers holding the positions up to the last group's end, with
    the checkpoints it keeps and the windows composed from every group's rows."""
    last, reader = used[-1], readers[-1]
    arrays = dict(arrays)
    for name, data in reader.kept.items():
        if not window_rows.is_rows(name):
            arrays[segment_file.plain(name)] = _array(data, last.file.by_name[name])
    for i, meta in enumerate(last.layers):
        if "size" in meta:  # format 2: its buffer from the rows
            pieces = [p for g, r in zip(used, readers) for p in _pieces(g, r, i)]
            for j, host in enumerate(window_rows.compose(meta, pieces)):
                arrays[f"{i}.s.{j}"] = _device(host, last.file.by_name[f"{i}.w.{j}"].dtype)
    out = []
    for i, (meta, c) in enumerate(zip(last.layers, fresh)):
        prefix = f"{i}."
        own = {name[len(prefix):]: a for name, a in arrays.items() if name.startswith(prefix)}
        out.append(layers.restoring(meta, c).restore(meta, [own], last.end, into=c))
    return out


def _pieces(g: _Group, reader: SegmentReader, i: int) -> list[window_rows.Piece]:
    """The rows of layer ``i`` a group's reader kept: format 2's rows, or the
    whole buffer a format-1 file checkpointed where the group ends."""
    out = []
    file = g.file
    old = f"{i}.s.0{g.taken}"
    if old in reader.kept and f"{i}.s.1{g.taken}" in reader.kept:
        k, v = (_host(reader.kept[f"{i}.s.{j}{g.taken}"], file.by_name[f"{i}.s.{j}{g.taken}"])
                for j in (0, 1))
        return [window_rows.checkpoint_rows(g.layers[i], k, v)]
    ends = sorted({int(n.partition("@")[2] or file.meta["end"]) for n in reader.kept
                   if window_rows.is_rows(n) and n.startswith(f"{i}.w.")})
    for end in ends:
        at = "" if end == int(file.meta["end"]) else segment_file.taken_at("", end)
        names = [f"{i}.w.{j}{at}" for j in (0, 1)]
        if not all(n in reader.kept for n in names):
            raise CacheFileRejected("damaged header (a window's keys without its values)")
        k, v = (_host(reader.kept[n], file.by_name[n]) for n in names)
        out.append(window_rows.rows_piece(_described_at(file, end)[i], k, v))
    return out


def _described_at(file: SegmentFile, end: int) -> list[dict[str, Any]]:
    """The layers as a file describes them at ``end``: its own end, or a
    checkpoint a joined file took inside it."""
    try:
        if end == int(file.meta["end"]):
            return json.loads(file.meta["layers"])
        return json.loads(file.meta.get("checkpoints", "{}"))[str(end)]
    except (KeyError, ValueError, TypeError):
        raise CacheFileRejected("damaged metadata") from None


_NUMPY = {"F16": np.float16, "F32": np.float32, "U32": np.uint32, "I32": np.int32,
          "U8": np.uint8, "BF16": np.uint16}


def _host(data: bytearray, t: Tensor) -> np.ndarray:
    return np.frombuffer(data, dtype=_NUMPY[t.dtype]).reshape(t.shape)


def _device(host: np.ndarray, dtype: str) -> mx.array:
    out = mx.array(host)
    return out.view(mx.bfloat16) if dtype == "BF16" else out


def _array(data: bytearray, t: Tensor) -> mx.array:
    return _device(_host(data, t), t.dtype)


def _joined(t: Tensor, groups: list[_Group], readers: list[SegmentReader],
            length: int) -> mx.array:
    """One tensor of positions at the branch's whole length, to be read from
    every file when it is evaluated (its reads then land on the reader threads)."""
    size = segment_file.ITEMSIZE[t.dtype]
    rows, width = int(np.prod(t.shape[:-2])), t.shape[-1] * size
    alloc = -(-length // STEP) * STEP
    joined = _Joined(t.dtype, (*t.shape[:-2], alloc, t.shape[-1]))
    for r in range(rows):
        at = r * alloc * width
        for g, reader in zip(groups, readers):
            own = g.file.by_name[t.name]
            span = own.shape[-2] * width
            joined.add(at + g.start * width, (g.end - g.start) * width, reader,
                       own.begin + r * span)
        joined.add(at + length * width, (alloc - length) * width, None, 0)
    return mx.load(joined, format="safetensors")["t"]


class _Joined(io.RawIOBase):
    """A safetensors file of one tensor whose bytes come from other files'
    spans: MLX allocates the tensor and reads into it through ``readinto``,
    which starts the reads on the landing's threads and returns; the restore
    keeps the array, unread, until they have landed (``Landing.settle``)."""

    def __init__(self, dtype: str, shape: tuple[int, ...]):
        nbytes = int(np.prod(shape)) * segment_file.ITEMSIZE[dtype]
        raw = json.dumps({"t": {"dtype": dtype, "shape": list(shape),
                                "data_offsets": [0, nbytes]}}).encode()
        raw += b" " * (-len(raw) % 8)
        self._head = struct.pack("<Q", len(raw)) + raw
        self._size = len(self._head) + nbytes
        self._pos = 0
        self._starts: list[int] = []
        self._spans: list[tuple[int, SegmentReader | None, int]] = []

    def add(self, at: int, n: int, reader: SegmentReader | None, offset: int) -> None:
        """Data bytes ``[at, at + n)`` are the file's from ``offset`` (zeros if None)."""
        if n:
            self._starts.append(len(self._head) + at)
            self._spans.append((n, reader, offset))

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = offset + (0, self._pos, self._size)[whence]
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self._size - self._pos)
        done = 0
        if self._pos < len(self._head):
            done = min(n, len(self._head) - self._pos)
            view[:done] = self._head[self._pos:self._pos + done]
        i = bisect.bisect_right(self._starts, self._pos + done) - 1
        while done < n:
            start, (span, reader, offset) = self._starts[i], self._spans[i]
            skip = self._pos + done - start
            piece = view[done:min(n, done + span - skip)]
            if reader is None:
                piece[:] = bytes(len(piece))
            else:
                reader.into(piece, offset + skip)  # lands on the reader threads
            done += len(piece)
            i += 1
        self._pos += n
        return n
