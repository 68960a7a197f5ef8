"""A segment file read on the landing's threads (reads in parallel, hashing in
file order on its own thread) gives the same bytes, kept checkpoints and
checksum as one read on the calling thread, and a file cut short still fails."""

from __future__ import annotations

import os

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, KVCache

from mlxchat.engine.disk import segment_file, segments
from mlxchat.engine.disk.landing import Landing


def _written(tmp_path):
    layers = []
    for seed in range(3):
        c = KVCache()
        k = mx.random.normal((1, 2, 300, 64), key=mx.random.key(seed))
        c.update_and_fetch(k, k + 1)
        layers.append(c)
    state = ArraysCache(1)
    state[0] = mx.arange(4096, dtype=mx.float32).reshape(1, 4096)
    layers.append(state)
    info = segments.write(tmp_path / "s.safetensors", layers, 0, 300, list(range(300)),
                          fingerprint="f", template_hash="t")
    return tmp_path / "s.safetensors", info.checksum


def _read(path, checksum, landing):
    file = segment_file.open_file(path)
    try:
        keep = frozenset(file.checkpoints())
        reader = segment_file.SegmentReader(file, checksum, keep, landing)
        views = []
        for t in file.tensors:
            if segment_file.positional(t.name):
                buf = bytearray(t.end - t.begin)
                views.append(buf)
                reader.into(memoryview(buf), t.begin)
        if landing is not None:
            landing.settle()
        return views, reader.checksum(), dict(reader.kept)
    finally:
        file.close()


def test_landed_reads_match_the_calling_threads(tmp_path):
    path, checksum = _written(tmp_path)
    plain = _read(path, checksum, None)
    landing = Landing()
    try:
        landed = _read(path, checksum, landing)
    finally:
        landing.close()
    assert landed[1] == plain[1] == checksum
    assert landed[0] == plain[0] and landed[2] == plain[2] and landed[2]


def test_a_file_cut_short_fails_its_checksum_when_landed(tmp_path):
    path, checksum = _written(tmp_path)
    file = segment_file.open_file(path)  # opened whole, then cut under it
    os.truncate(path, file.size - 5000)
    landing = Landing()
    try:
        reader = segment_file.SegmentReader(file, checksum, landing=landing)
        for t in file.tensors:
            if segment_file.positional(t.name):
                reader.into(memoryview(bytearray(t.end - t.begin)), t.begin)
        landing.settle()
        assert reader.checksum() == ""
    finally:
        landing.close()
        file.close()
