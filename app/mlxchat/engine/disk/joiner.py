"""Consecutive KV segment files joined into one, for a restore that opens one
file where it opened one per turn.

The result is an ordinary segment of the whole span: each array of
positions is the sources' arrays laid end to end, so a restore reads it
straight into place, and a row naming any span inside it restores from it.
Layers that keep a checkpoint instead of positions (sliding windows,
chunked attention, recurrent states) keep every source's checkpoint: the
last one under its plain name (the joined file's own end), the others under
``segment_file.taken_at(name, end)`` with their layers' description in the
``checkpoints`` metadata, so a branch that ends where a source ended still
restores from the joined file. Only the bytes are moved (no MLX): each
source is read once, front to back, its checksum checked on the same bytes;
a damaged source stops the join and nothing is written.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, BinaryIO, Sequence

from mlxchat.engine.disk import segment_file
from mlxchat.engine.disk.checks import CacheFileRejected
from mlxchat.engine.disk.segment_file import SegmentFile, SegmentReader
from mlxchat.engine.disk.segments import SegmentInfo, SegmentRef, write_durably, write_header
from mlxchat.engine.kv import layers

_BUFFER = 8 << 20
_ORIGIN = ("format", "mlx_lm_version", "model_fingerprint", "template_hash")


def origin_of(path: Path) -> tuple[str, ...] | None:
    """What a segment file was made for (format, mlx-lm, model, template), from
    its header; None when it cannot be read. Files of two origins never join."""
    try:
        file = segment_file.open_file(path)
    except CacheFileRejected:
        return None
    try:
        return tuple(str(file.meta.get(k, "")) for k in _ORIGIN)
    finally:
        file.close()


def compact(sources: Sequence[Sequence[SegmentRef]], out: Path) -> SegmentInfo:
    """Join files into one new file at ``out`` (or a fresh name beside it: the
    returned info's path): each item of ``sources`` is the consecutive
    references naming one file, which they must cover whole.
    CacheFileRejected (nothing written) when they cannot be joined."""
    files: list[SegmentFile] = []
    try:
        for refs in sources:
            files.append(segment_file.open_file(refs[0].path))
            _check(files[-1], refs, files[0])
        start, end = sources[0][0].start, sources[-1][-1].end
        tokens = [t for refs in sources for r in refs for t in r.token_ids]
        meta = dict(files[-1].meta, start=str(start), end=str(end), tokens=json.dumps(tokens))
        points = _checkpoints(files)
        if points:
            meta["checkpoints"] = json.dumps(points)
        readers = [SegmentReader(f, refs[0].checksum) for f, refs in zip(files, sources)]
        size = sum(f.size - len(f.head) for f in files)
        expected = [refs[0].checksum for refs in sources]
        checksum, written, out = write_durably(
            out, lambda fh: _join(fh, files, readers, expected, meta, end - start),
            needed=size)
    finally:
        for f in files:
            f.close()
    bits = layers.meta_bits(json.loads(meta["layers"]))
    return SegmentInfo(path=str(out), start=start, end=end, bytes=written, checksum=checksum,
                       kv_bits=bits, mlx_lm_version=meta["mlx_lm_version"])


def _check(file: SegmentFile, refs: Sequence[SegmentRef], first: SegmentFile) -> None:
    meta = file.meta
    start, end, tokens = segment_file.span(meta)
    if (start, end) != (refs[0].start, refs[-1].end) or tokens != [
            t for r in refs for t in r.token_ids]:
        raise CacheFileRejected(f"{file.path.name} is not wholly the branch's")
    if any(meta.get(k) != first.meta.get(k) for k in _ORIGIN) or _layouts(file) != _layouts(
            first):
        raise CacheFileRejected(f"{file.path.name} was made for another model or layout")
    if file.own() != first.own():
        raise CacheFileRejected(f"{file.path.name} holds other arrays")
    for t in file.tensors:
        if not segment_file.positional(t.name):
            continue
        if len(t.shape) < 2 or t.shape[-2] != end - start:
            raise CacheFileRejected(f"{file.path.name}: damaged header")
        if segment_file.kind(t) != segment_file.kind(first.by_name[t.name]):
            raise CacheFileRejected(f"{file.path.name} holds other arrays")


def _layouts(file: SegmentFile) -> list[tuple]:
    try:
        return [layers.layout(m) for m in json.loads(file.meta["layers"])]
    except (KeyError, ValueError, TypeError):
        raise CacheFileRejected(f"{file.path.name}: damaged metadata") from None


def _checkpoints(files: Sequence[SegmentFile]) -> dict[str, Any]:
    """The layers' descriptions at every checkpoint the joined file keeps
    inside it (not at its end), by position."""
    points: dict[str, Any] = {}
    if not any(not segment_file.positional(t.name) for t in files[0].tensors):
        return points
    for f in files:
        try:
            points.update(json.loads(f.meta.get("checkpoints", "{}")))
        except ValueError:
            raise CacheFileRejected(f"{f.path.name}: damaged metadata") from None
    for f in files[:-1]:
        points[f.meta["end"]] = json.loads(f.meta["layers"])
    return points


def _layout(files: Sequence[SegmentFile], length: int
            ) -> list[tuple[str, str, list[int], list[tuple[SegmentFile, segment_file.Tensor]]]]:
    """The joined file's arrays in order: (name, dtype, shape, the sources'
    pieces). Arrays of positions join every file's; a checkpoint is each
    file's own, those inside the joined file named where they were taken."""
    out = []
    for t in files[0].tensors:
        if "@" in t.name:
            continue
        if segment_file.positional(t.name):
            out.append((t.name, t.dtype, [*t.shape[:-2], length, t.shape[-1]],
                        [(f, f.by_name[t.name]) for f in files]))
            continue
        for n, f in enumerate(files):
            taken = sorted((x for x in f.tensors if segment_file.plain(x.name) == t.name
                            and x.name != t.name), key=lambda x: int(x.name.split("@")[1]))
            own = f.by_name[t.name]
            name = t.name if n == len(files) - 1 else segment_file.taken_at(t.name, int(
                f.meta["end"]))
            for x in [*taken, own]:
                out.append((name if x is own else x.name, x.dtype, list(x.shape), [(f, x)]))
    return out


def _join(fh: BinaryIO, files: list[SegmentFile], readers: list[SegmentReader],
          expected: list[str], meta: dict[str, str], length: int) -> tuple[str, int]:
    """Write the joined file to ``fh``: (its checksum, its size); CacheFileRejected
    when a source's bytes do not match their ``expected`` checksum."""
    header: dict[str, Any] = {"__metadata__": meta}
    offset = 0
    planned = _layout(files, length)
    for name, dtype, shape, pieces in planned:
        nbytes = sum(t.end - t.begin for _, t in pieces)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    hasher, head = write_header(fh, header)
    by_file = {id(f): r for f, r in zip(files, readers)}
    buffer = bytearray(min(_BUFFER, max(1, *(t.end - t.begin for f in files for t in f.tensors))))
    for name, _, _, pieces in planned:
        rows = math.prod(pieces[0][1].shape[:-2]) if segment_file.positional(name) else 1
        for r in range(rows):  # a row: all positions of one head
            for f, own in pieces:
                width = (own.end - own.begin) // rows
                for at in range(0, width, len(buffer)):
                    view = memoryview(buffer)[:min(len(buffer), width - at)]
                    by_file[id(f)].into(view, own.begin + r * width + at)
                    fh.write(view)
                    hasher.update(view)
    for n, (reader, checksum) in enumerate(zip(readers, expected)):
        if reader.checksum() != checksum:
            raise CacheFileRejected(
                f"segment {n + 1}: checksum mismatch (file changed or damaged)")
    return hasher.label(), head + offset

