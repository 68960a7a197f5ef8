"""Segment format 2: a sliding-window layer writes only the rows a turn
changed, not its whole window; a restore composes them back exactly (the
buffer, its slots and offsets, the next step's logits), from one file per
turn, from a joined file (at its end and where a source ended inside it), and
from format-1 files (alone or followed by format-2 ones). Real mlx-lm models
of the Gemma 3 and gpt-oss tiny families (window 24), fed in turns that wrap it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.models.cache import RotatingKVCache, make_prompt_cache

from mlxchat.engine.disk import branch_restore, joiner, segment_file, segments
from mlxchat.engine.kv import layers

from tests.engine.test_layers import _Model, _model, _prefill
from tests.old_snapshots import write_old_segment

TURNS = ((30, 5), (3, 4), (12, 0), (40, 6), (2, 3), (1, 1), (5, 0))
"""(prompt tokens, reply tokens) a turn: prefills in one chunk (mlx-lm's concat
path), replies a token at a time (the in-place path that wraps the buffer);
a turn without a reply ends with the buffer longer than the window."""
ORIGIN = dict(fingerprint="f", template_hash="t")


def _turns(model: Any) -> tuple[list[Any], list[tuple[int, int]], list[list[Any]]]:
    """The live cache after every turn, each turn's span, and a copy of the
    cache at each turn's end."""
    cache = make_prompt_cache(model)
    spans, copies, at = [], [], 0
    for n, (prompt, reply) in enumerate(TURNS):
        _prefill(model, cache, [3 + (n * 7 + i) % 50 for i in range(prompt)])
        for t in range(reply):
            _prefill(model, cache, [5 + (n + t) % 40])
        spans.append((at, at + prompt + reply))
        at += prompt + reply
        copies.append([layers.copy(c) for c in cache])
    return cache, spans, copies


def _held(c: Any) -> list[Any]:
    if isinstance(c, RotatingKVCache):
        return [c.keys, c.values, (c.offset, c.keep, c.max_size, c._idx)]
    return [c.keys[..., :c.offset, :], c.values[..., :c.offset, :], c.offset]


def _same(a: list[Any], b: list[Any]) -> bool:
    for x, y in zip(a, b, strict=True):
        for p, q in zip(_held(x), _held(y), strict=True):
            if isinstance(p, mx.array):
                if p.shape != q.shape or not mx.array_equal(p, q).item():
                    return False
            elif p != q:
                return False
    return True


def _next_logits_agree(model: Any, a: list[Any], b: list[Any]) -> bool:
    return mx.array_equal(_prefill(model, a, [11, 12]), _prefill(model, b, [11, 12])).item()


def _write(folder: Path, cache_at: list[list[Any]], spans, writer) -> list[segments.SegmentRef]:
    """One file per turn, each written from the cache as it was at the turn's end."""
    refs = []
    for (start, end), cache in zip(spans, cache_at):
        path = folder / f"turn-{start}.safetensors"
        tokens = list(range(start, end))
        checksum = writer(path, cache, start, end, tokens)
        refs.append(segments.SegmentRef(path, start, end, checksum, tokens))
    return refs


def _new(path, cache, start, end, tokens) -> str:
    return segments.write(path, cache, start, end, tokens, **ORIGIN).checksum


def _old(path, cache, start, end, tokens) -> str:
    return write_old_segment(path, cache, start, end, tokens, **ORIGIN)[0]


def _restored(model: Any, refs: list[segments.SegmentRef]) -> list[Any]:
    got = branch_restore.restore(_Model(lambda: make_prompt_cache(model)), refs, **ORIGIN)
    assert got.reason is None and got.end == refs[-1].end, got.reason
    return got.layers


@pytest.fixture(scope="module", params=["gemma3", "gpt_oss"])
def turned(request):
    model = _model(request.param)
    cache, spans, copies = _turns(model)
    assert any(isinstance(c, RotatingKVCache) and c.offset > c.max_size for c in cache)
    return model, spans, copies


def test_a_turn_writes_only_the_window_rows_it_changed(turned, tmp_path):
    model, spans, copies = turned
    refs = _write(tmp_path, copies, spans, _new)
    windows = [i for i, c in enumerate(copies[0]) if isinstance(c, RotatingKVCache)]
    for ref, cache in zip(refs, copies):
        file = segment_file.open_file(ref.path)
        try:
            described = json.loads(file.meta["layers"])
            assert file.meta["format"] == segments.FORMAT == "mlxchat-kv-segment-2"
            for i in windows:
                window = cache[i]
                rows = file.by_name[f"{i}.w.0"].shape[-2]
                # The turn's positions the window still holds: all of a short turn,
                # the window's worth of a long one; never the rest of the window.
                held = min(ref.end - ref.start, window.keys.shape[-2])
                assert rows == held, (ref.start, rows, held)
                assert described[i]["rows"] == [[ref.end - held, ref.end]]
                assert f"{i}.s.0" not in file.by_name
        finally:
            file.close()
    # Format 1 wrote the whole window every turn: a 2-token turn wrote 24+ rows.
    (tmp_path / "old").mkdir()
    old = _write(tmp_path / "old", copies, spans, _old)
    rows_bytes = {i: 2 * copies[0][i].keys[..., :1, :].nbytes for i in windows}
    for o, n, cache in zip(old, refs, copies):
        if n.end - n.start < 24:
            saved = sum((cache[i].keys.shape[-2] - (n.end - n.start)) * b
                        for i, b in rows_bytes.items())
            assert o.path.stat().st_size - n.path.stat().st_size >= saved - 512


def test_every_turn_end_restores_exactly(turned, tmp_path):
    model, spans, copies = turned
    refs = _write(tmp_path, copies, spans, _new)
    for k in range(1, len(refs) + 1):
        restored = _restored(model, refs[:k])
        assert _same(restored, copies[k - 1]), k
    assert _next_logits_agree(model, restored, [layers.copy(c) for c in copies[-1]])


def test_a_joined_file_restores_at_its_end_and_inside_it(turned, tmp_path):
    model, spans, copies = turned
    refs = _write(tmp_path, copies, spans, _new)
    info = joiner.compact([[r] for r in refs], tmp_path / "joined.safetensors")
    inside = [segments.SegmentRef(Path(info.path), r.start, r.end, info.checksum, r.token_ids)
              for r in refs]
    for k in (2, 4, len(inside)):
        assert _same(_restored(model, inside[:k]), copies[k - 1]), k
    restored = _restored(model, inside)
    assert _next_logits_agree(model, restored, [layers.copy(c) for c in copies[-1]])


def test_format_1_files_still_restore_alone_joined_and_followed_by_format_2(turned, tmp_path):
    model, spans, copies = turned
    (tmp_path / "old").mkdir()
    old = _write(tmp_path / "old", copies, spans, _old)
    new = _write(tmp_path, copies, spans, _new)
    assert segment_file.open_file(old[0].path).meta["format"] == "mlxchat-kv-segment-1"
    assert _same(_restored(model, old), copies[-1])
    mixed = old[:2] + new[2:]  # a session saved before, continued after
    restored = _restored(model, mixed)
    assert _same(restored, copies[-1])
    assert _next_logits_agree(model, restored, [layers.copy(c) for c in copies[-1]])
    info = joiner.compact([[r] for r in old[:3]], tmp_path / "old-joined.safetensors")
    joined = [segments.SegmentRef(Path(info.path), r.start, r.end, info.checksum, r.token_ids)
              for r in old[:3]]
    assert _same(_restored(model, joined[:2]), copies[1])
    assert _same(_restored(model, joined + new[3:]), copies[-1])
