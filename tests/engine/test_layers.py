"""The cache-layer table: for every row, what it says of a live layer (bytes,
length, trimmable) agrees with what the layer holds, counted here from the
arrays fed into it; slices of it joined back, in memory and through segment
files, hold the same and go on the same when fed more."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models.cache import (
    ArraysCache,
    CacheList,
    ChunkedKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    make_prompt_cache,
)

from mlxchat.engine.disk import branch_restore, segments
from mlxchat.engine.disk.checks import CacheFileRejected
from mlxchat.engine.kv import layers, prompt_cache

from tests.families.builders import _BASE, FAMILIES

HEADS, DIM = 2, 32
PER_POSITION = 2 * HEADS * DIM * 4  # float32 keys and values


def _kv(t: int, seed: int) -> tuple[mx.array, mx.array]:
    key = mx.random.key(seed)
    k, v = mx.random.normal((2, 1, HEADS, t, DIM), key=key)
    return k, v


@dataclass
class Live:
    """A layer fed chunk by chunk, with what the test knows it was fed."""

    layer: Any
    fed: list[tuple[mx.array, mx.array]]

    @property
    def tokens(self) -> int:
        return sum(k.shape[2] for k, _ in self.fed)


def _feed(layer: Any, sizes: tuple[int, ...], seed: int = 0) -> Live:
    live = Live(layer, [])
    for n, size in enumerate(sizes):
        k, v = _kv(size, seed + n)
        if isinstance(layer, ChunkedKVCache):
            layer.maybe_trim_front()  # as llama4 does before each update
        layer.update_and_fetch(k, v)
        live.fed.append((k, v))
    mx.eval(layer.state)
    return live


def _state(seed: int) -> list[mx.array]:
    key = mx.random.key(seed)
    return [mx.random.normal((1, 3, 8), key=key), mx.random.normal((1, 2, 4, 4), key=key)]


def _recurrent(seed: int = 0) -> ArraysCache:
    layer = ArraysCache(2)
    layer[0], layer[1] = _state(seed)
    return layer


SIZES = (5, 1, 1, 3)
"""Chunks fed: a prefill, two single tokens (mlx-lm's in-place path), another chunk."""

BUILD: dict[str, Callable[[], Live]] = {
    "KVCache": lambda: _feed(KVCache(), SIZES),
    "QuantizedKVCache": lambda: _feed(QuantizedKVCache(group_size=32, bits=4), SIZES),
    "RotatingKVCache": lambda: _feed(RotatingKVCache(max_size=6, keep=2), SIZES),
    "ChunkedKVCache": lambda: _feed(ChunkedKVCache(chunk_size=6), SIZES),
    "ArraysCache": lambda: Live(_recurrent(), []),
    "CacheList": lambda: Live(CacheList(_feed(KVCache(), SIZES).layer, _recurrent()), []),
}


def test_every_row_is_built_here():
    assert sorted(BUILD) == sorted(cls.__name__ for cls in layers.TABLE)


def _held(c: Any) -> list[mx.array]:
    """What a layer holds that its next use depends on, read through mlx-lm."""
    if isinstance(c, CacheList):
        return [a for part in c.caches for a in _held(part)]
    if isinstance(c, ArraysCache):
        return [a for a in c.cache if a is not None]
    if isinstance(c, RotatingKVCache):
        return [c.keys, c.values, mx.array([c.offset, c.keep, c.max_size, c._idx])]
    if isinstance(c, ChunkedKVCache):
        return [*c.keys_and_values(), mx.array([c.offset, c.start_position])]
    return [a for _, a in tree_flatten(c.keys_and_values())] + [mx.array(c.offset)]


def _same(a: Any, b: Any) -> bool:
    held_a, held_b = _held(a), _held(b)
    return type(a) is type(b) and len(held_a) == len(held_b) and all(
        x.shape == y.shape and mx.array_equal(x, y).item() for x, y in zip(held_a, held_b))


def _next_step_agrees(a: Any, b: Any) -> bool:
    """Fed the same next token, both give the attention the same keys and values."""
    if isinstance(a, CacheList):
        return all(_next_step_agrees(x, y) for x, y in zip(a.caches, b.caches))
    if isinstance(a, ArraysCache):
        return _same(a, b)
    k, v = _kv(1, 99)
    out_a, out_b = a.update_and_fetch(k, v), b.update_and_fetch(k, v)
    return all(mx.array_equal(x, y).item()
               for (_, x), (_, y) in zip(tree_flatten(out_a), tree_flatten(out_b)))


@pytest.mark.parametrize("name", sorted(BUILD))
def test_length_and_bytes_agree_with_what_was_fed(name):
    live = BUILD[name]()
    c, row = live.layer, layers.row(live.layer)
    assert row is layers.TABLE[type(c)] and row.cls.__name__ == name
    if name == "ArraysCache":
        assert row.length(c) is None
        assert row.nbytes(c) == sum(a.nbytes for a in _state(0))
    elif name == "CacheList":
        assert row.length(c) == sum(SIZES)
        assert row.nbytes(c) == sum(SIZES) * PER_POSITION + sum(a.nbytes for a in _state(0))
    else:
        assert row.length(c) == live.tokens == c.offset
    if name in ("KVCache", "RotatingKVCache", "ChunkedKVCache"):
        # The positions the layer holds now: all, the window's, the chunk's.
        held = {"KVCache": lambda: live.tokens, "RotatingKVCache": lambda: c.keys.shape[2],
                "ChunkedKVCache": lambda: c.offset - c.start_position}[name]()
        assert row.nbytes(c) == held * PER_POSITION and row.dtype(c) == mx.float32
    if name == "QuantizedKVCache":
        keys = mx.concatenate([k for k, _ in live.fed], axis=2)
        values = mx.concatenate([v for _, v in live.fed], axis=2)
        quantized = [mx.quantize(x, group_size=32, bits=4) for x in (keys, values)]
        assert row.nbytes(c) == sum(a.nbytes for q in quantized for a in q)
        assert row.bits(c) == 4 and row.dtype(c) is None


@pytest.mark.parametrize("name", sorted(BUILD))
def test_growth_batching_and_rows_on_disk_follow_the_class(name):
    """What the next tokens add (bytes a position, and the window that caps
    them), whether mlx-lm's batch form takes the layer, whether a segment
    keeps it as rows: each from its row, as the class works."""
    c = BUILD[name]().layer
    row = layers.row(c)
    keys = mx.concatenate([k for k, _ in BUILD["KVCache"]().fed], axis=2)
    quantized = sum(a.nbytes for a in mx.quantize(keys, group_size=32, bits=4)) * 2
    expected = {"KVCache": [(PER_POSITION, None)],
                "QuantizedKVCache": [(quantized // sum(SIZES), None)],
                "RotatingKVCache": [(PER_POSITION, 6)], "ChunkedKVCache": [(PER_POSITION, 6)],
                "ArraysCache": [], "CacheList": [(PER_POSITION, None)]}[name]
    assert row.growth(c) == expected
    assert row.joins_batch(c) == (name in ("KVCache", "RotatingKVCache"))
    assert row.as_rows == (name in ("RotatingKVCache", "ChunkedKVCache"))
    if row.joins_batch(c):  # a subclass has no batch form of its own
        sub = type("Sub", (type(c),), {})
        assert not row.joins_batch(sub.__new__(sub))


def test_an_empty_layer_grows_by_bytes_not_known_yet():
    assert layers.row(KVCache()).growth(KVCache()) == [(None, None)]
    window = RotatingKVCache(max_size=6, keep=2)
    assert layers.row(window).growth(window) == [(None, 6)]


def test_the_window_wrapped_and_the_chunk_moved_on():
    """The cases above reach the states that make these rows differ."""
    window = BUILD["RotatingKVCache"]().layer
    assert window.offset > window.max_size and not layers.row(window).trimmable(window)
    chunked = BUILD["ChunkedKVCache"]().layer
    assert chunked.start_position > 0


@pytest.mark.parametrize("name", sorted(BUILD))
def test_slices_joined_in_memory_hold_the_same(name):
    live = BUILD[name]()
    c, row = live.layer, layers.row(live.layer)
    n = row.length(c) or 0
    runs = [row.arrays(c, 0, 4), row.arrays(c, 4, n)]
    joined = row.restore(row.meta(c), runs, n)
    assert joined is not c and _same(joined, c)
    if name in ("KVCache", "QuantizedKVCache"):
        assert row.sliceable(c)
        # Each run holds only its own positions.
        assert {a.shape[2] for a in runs[0].values()} == {4}
        assert {a.shape[2] for a in runs[1].values()} == {n - 4}
    if name == "KVCache":
        fed = mx.concatenate([k for k, _ in live.fed], axis=2)
        assert mx.array_equal(joined.keys, fed).item()
    assert _next_step_agrees(joined, c)


def _advance(c: Any) -> None:
    """Change a layer as a model's next step does: positions are written into
    the arrays in place, a recurrent state is replaced or updated in place."""
    if isinstance(c, CacheList):
        for part in c.caches:
            _advance(part)
    elif isinstance(c, ArraysCache):
        c.cache[0][..., 0] = 5.0
        c[1] = c[1] + 1
    else:
        c.update_and_fetch(*_kv(1, 7))


@pytest.mark.parametrize("name", sorted(BUILD))
def test_a_copy_stays_as_it_was(name):
    c = BUILD[name]().layer
    copied = layers.copy(c)
    assert copied is not c and _same(copied, c)
    before = [mx.array(a) for a in _held(c)]
    _advance(c)
    assert not _same(copied, c)
    after = _held(copied)
    assert len(after) == len(before) and all(mx.array_equal(x, y).item()
                                             for x, y in zip(after, before))


class _Model:
    """What a restore needs of a model: fresh layers like these."""

    def __init__(self, make: Callable[[], list[Any]]):
        self.make_cache = make


def _through_files(tmp_path, cache: list[Any], split: int, make: Callable[[], list[Any]],
                   before: Callable[[], None] = lambda: None) -> list[Any]:
    """Segments [0, split) and [split, end) written and read back into a cache.
    ``before`` feeds the rest after the first is written (None: all fed already)."""
    refs = []
    for start, end in ((0, split), (split, None)):
        if end is None:
            before()
            end = prompt_cache.offset(cache) or split + 1
        path = tmp_path / f"seg-{start}.safetensors"
        tokens = list(range(start, end))
        info = segments.write(path, cache, start, end, tokens, fingerprint="f", template_hash="t")
        refs.append(segments.SegmentRef(path, start, end, info.checksum, tokens))
    got = branch_restore.restore(_Model(make), refs, fingerprint="f", template_hash="t")
    if got.layers is None:
        raise CacheFileRejected(got.reason)
    assert got.reason is None and got.end == refs[-1].end
    return got.layers


@pytest.mark.parametrize("name", sorted(BUILD))
def test_segment_files_round_trip(name, tmp_path):
    live = BUILD[name]()
    c = live.layer
    fresh = {"KVCache": KVCache, "QuantizedKVCache": KVCache,
             "RotatingKVCache": lambda: RotatingKVCache(max_size=6, keep=2),
             "ChunkedKVCache": lambda: ChunkedKVCache(chunk_size=6),
             "ArraysCache": lambda: ArraysCache(2),
             "CacheList": lambda: CacheList(KVCache(), ArraysCache(2))}[name]
    [restored] = _through_files(tmp_path, [c], 4, lambda: [fresh()])
    assert _same(restored, c)
    assert layers.row(restored).nbytes(restored) == layers.row(c).nbytes(c)
    assert _next_step_agrees(restored, c)


def test_a_segment_of_another_layer_type_is_refused(tmp_path):
    live = BUILD["RotatingKVCache"]()
    with pytest.raises(CacheFileRejected, match="cache types do not match"):
        _through_files(tmp_path, [live.layer], 4, lambda: [ArraysCache(2)])


@pytest.mark.parametrize("name", sorted(BUILD))
def test_trimming_and_quantizing(name):
    c = BUILD[name]().layer
    row = layers.row(c)
    assert row.trimmable(c) == c.is_trimmable()
    anywhere = {"KVCache": True, "QuantizedKVCache": True, "ChunkedKVCache": True,
                "RotatingKVCache": False, "ArraysCache": False, "CacheList": False}
    assert row.trims_anywhere(c) == anywhere[name]
    quantized = row.quantize(c, 8, 32)
    if name == "KVCache":
        assert type(quantized) is QuantizedKVCache and quantized.bits == 8
        assert quantized.offset == c.offset and layers.row(quantized).bits(quantized) == 8
        assert row.dtype(c) == mx.float32
    else:
        assert quantized is c


def test_a_subclass_takes_its_base_row_and_an_unknown_class_is_named():
    class MambaCache(ArraysCache):
        def __init__(self):
            super().__init__(size=2)

    assert layers.row(MambaCache()) is layers.TABLE[ArraysCache]

    class Odd:
        pass

    with pytest.raises(TypeError, match="Odd"):
        layers.row(Odd())


# -- caches of tiny random models built by mlx-lm -------------------------------------------

def _model(family: str, **config_changes: Any):
    fam = next(f for f in FAMILIES if f.name == family)
    config = {**_BASE, **fam.config, "model_type": fam.model_type, "vocab_size": 64,
              **config_changes}
    module = importlib.import_module(f"mlx_lm.models.{fam.model_type}")
    mx.random.seed(0)
    model = module.Model(module.ModelArgs.from_dict(config))
    mx.eval(model.parameters())
    return model


def _prefill(model, cache, tokens: list[int]) -> mx.array:
    logits = model(mx.array(tokens)[None], cache=cache)
    mx.eval(logits, [c.state for c in cache])
    return logits[0, -1]


@pytest.mark.parametrize("family,kinds", [
    ("llama3", {"KVCache"}),
    ("gemma3", {"KVCache", "RotatingKVCache"}),
    ("qwen3_next", {"KVCache", "ArraysCache"}),
])
def test_a_models_cache_through_segments_predicts_as_the_live_one(family, kinds, tmp_path):
    model = _model(family)
    cache = make_prompt_cache(model)
    assert {type(c).__name__ for c in cache} == kinds
    _prefill(model, cache, [3 + i % 50 for i in range(30)])

    def rest() -> None:  # one token at a time past the sliding window (24)
        for t in range(10):
            _prefill(model, cache, [7 + t])
    restored = _through_files(tmp_path, cache, 30, lambda: make_prompt_cache(model), rest)
    assert prompt_cache.offset(restored) == prompt_cache.offset(cache) == 40
    assert prompt_cache.kv_bytes(restored) == prompt_cache.kv_bytes(cache)
    assert prompt_cache.dtype_label(restored) == prompt_cache.dtype_label(cache) == "fp32"
    a, b = _prefill(model, restored, [11]), _prefill(model, cache, [11])
    assert mx.allclose(a, b, atol=1e-5).item()


def test_a_quantized_models_cache_counts_its_bits():
    model = _model("llama3", hidden_size=128, num_attention_heads=2, num_key_value_heads=1)
    cache = make_prompt_cache(model)
    _prefill(model, cache, list(range(3, 20)))
    quantized = prompt_cache.quantize(cache, 4, 64)
    assert prompt_cache.bits(quantized) == 4 and prompt_cache.dtype_label(quantized) == "4-bit"
    assert prompt_cache.offset(quantized) == prompt_cache.offset(cache) == 17
    # A 64-dim head at 4 bits: 8 uint32 words, one float32 scale and bias.
    per_head = 8 * 4 + 2 * 4
    heads = 1 * _BASE["num_hidden_layers"] * 2  # one KV head, keys and values, 2 layers
    assert prompt_cache.kv_bytes(quantized) == 17 * heads * per_head
    assert prompt_cache.dtype_label(cache) == "fp32" and prompt_cache.bits(cache) is None
