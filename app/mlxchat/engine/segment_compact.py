"""Consecutive KV segment files joined into one, for a restore that opens one
file where it opened one per turn.

The result is an ordinary segment of the whole span: each array of
positions is the sources' arrays laid end to end, so a restore reads it
straight into place, and a row naming any span inside it restores from it.
Only the bytes are moved (no MLX): each source is read once, front to back,
its checksum checked on the same bytes; a damaged source stops the join and
nothing is written. Sources that keep checkpoints (sliding windows,
recurrent states) are not joined: a row ending inside the joined file would
have no checkpoint to restore from.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, BinaryIO, Sequence

from mlxchat.engine import layers, segment_io
from mlxchat.engine.segment_io import Reader, SegmentFile
from mlxchat.engine.segments import (SegmentInfo, SegmentRef, SegmentRejected, write_durably,
                                     write_header)

_ORIGIN = ("format", "mlx_lm_version", "model_fingerprint", "template_hash", "layers")


def compact(sources: Sequence[Sequence[SegmentRef]], out: Path) -> SegmentInfo:
    """Join files into one at ``out``: each item of ``sources`` is the
    consecutive references naming one file, which they must cover whole.
    SegmentRejected (nothing written) when they cannot be joined."""
    files: list[SegmentFile] = []
    try:
        for refs in sources:
            files.append(segment_io.open_file(refs[0].path))
            _check(files[-1], refs, files[0])
        start, end = sources[0][0].start, sources[-1][-1].end
        tokens = [t for refs in sources for r in refs for t in r.token_ids]
        meta = dict(files[0].meta, start=str(start), end=str(end), tokens=json.dumps(tokens))
        readers = [Reader(f, refs[0].checksum) for f, refs in zip(files, sources)]
        size = sum(f.size - len(f.head) for f in files)
        expected = [refs[0].checksum for refs in sources]
        checksum, written = write_durably(
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
    start, end, tokens = segment_io.span(meta)
    if (start, end) != (refs[0].start, refs[-1].end) or tokens != [
            t for r in refs for t in r.token_ids]:
        raise SegmentRejected(f"{file.path.name} is not wholly the branch's")
    if any(meta.get(k) != first.meta.get(k) for k in _ORIGIN):
        raise SegmentRejected(f"{file.path.name} was made for another model or layout")
    names = [t.name for t in file.tensors]
    if names != [t.name for t in first.tensors]:
        raise SegmentRejected(f"{file.path.name} holds other arrays")
    for t in file.tensors:
        if not segment_io.positional(t.name) or len(t.shape) < 2 or t.shape[-2] != end - start:
            raise SegmentRejected(f"{file.path.name} keeps checkpoints")
        if segment_io.kind(t) != segment_io.kind(first.by_name[t.name]):
            raise SegmentRejected(f"{file.path.name} holds other arrays")


def _join(fh: BinaryIO, files: list[SegmentFile], readers: list[Reader], expected: list[str],
          meta: dict[str, str], length: int) -> tuple[str, int]:
    """Write the joined file to ``fh``: (its checksum, its size); SegmentRejected
    when a source's bytes do not match their ``expected`` checksum."""
    header: dict[str, Any] = {"__metadata__": meta}
    offset = 0
    for t in files[0].tensors:
        shape = [*t.shape[:-2], length, t.shape[-1]]
        nbytes = sum(f.by_name[t.name].end - f.by_name[t.name].begin for f in files)
        header[t.name] = {"dtype": t.dtype, "shape": shape,
                          "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    hasher, head = write_header(fh, header)
    buffer = bytearray(max(_row_bytes(f.by_name[t.name]) for f in files for t in f.tensors))
    for t in files[0].tensors:
        for r in range(math.prod(t.shape[:-2])):
            for f, reader in zip(files, readers):
                own = f.by_name[t.name]
                view = memoryview(buffer)[:_row_bytes(own)]
                reader.into(view, own.begin + r * len(view))
                fh.write(view)
                hasher.update(view)
    for n, (reader, checksum) in enumerate(zip(readers, expected)):
        if reader.checksum() != checksum:
            raise SegmentRejected(f"segment {n + 1}: checksum mismatch (file changed or damaged)")
    return hasher.label(), head + offset


def _row_bytes(t: segment_io.Tensor) -> int:
    """Bytes of one row of positions (all positions of one head)."""
    return t.shape[-2] * t.shape[-1] * segment_io.ITEMSIZE[t.dtype]
