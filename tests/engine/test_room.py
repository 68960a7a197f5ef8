"""Room figures per layer kind, against bytes worked out by hand for the
Gemma 3 tiny family (layer 0 a sliding window of 24, layer 1 full attention,
one KV head of 16, float32): past the window only the full layer grows, so
the room is what the full layer's bytes per token leave, not the average's."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache, RotatingKVCache, make_prompt_cache

from mlxchat.chat import Message
from mlxchat.commands.figures import per_token_text
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.kv import prompt_cache, room
from mlxchat.models import load_folder
from mlxchat.models.memory import KVLayout, fit_context, Available, MIN_CONTEXT
from mlxchat.tui.formatting import kv_room

from tests.families.builders import FAMILIES, write_family_model

from .conftest import run

POSITION = 2 * 1 * 16 * 4
"""Bytes one position takes in one layer: keys and values, 1 head of 16 floats."""
WINDOW = 24


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    family = next(f for f in FAMILIES if f.name == "gemma3")
    return load_folder(write_family_model(family, tmp_path_factory.mktemp("gemma3")))


def _fed(model, n: int) -> list:
    cache = make_prompt_cache(model)
    for i in range(n):
        model(mx.array([[5 + i % 50]]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


def test_the_layout_read_from_a_mixed_cache_is_the_hand_computed_one(gemma3):
    cache = _fed(gemma3.model, 40)
    assert [type(c) for c in cache] == [RotatingKVCache, KVCache]
    assert room.layout(cache) == KVLayout(POSITION, ((POSITION, WINDOW),))
    # 40 tokens held: 40 in the full layer, the window's 24 in the other.
    assert prompt_cache.kv_bytes(cache) == 40 * POSITION + WINDOW * POSITION
    assert room.layout(make_prompt_cache(gemma3.model)) is None  # nothing to read yet


def test_room_past_the_window_counts_only_the_full_layers():
    layout = KVLayout(POSITION, ((POSITION, WINDOW),))
    held, kv = 40, 64 * POSITION
    room_ = kv_room(kv_bytes=kv, cached_tokens=held, budget_bytes=kv + 1000 * POSITION,
                    context_window=100_000, layout=layout)
    # Every byte left goes to the full layer: 1000 tokens (the average, 64 / 40
    # positions a token, would say 625).
    assert (room_.by_memory, room_.limit) == (1000, "memory")
    average = kv_room(kv_bytes=kv, cached_tokens=held, budget_bytes=kv + 1000 * POSITION,
                      context_window=100_000)
    assert average.by_memory == 625


def test_room_before_the_window_fills_counts_both_until_it_does():
    layout = KVLayout(POSITION, ((POSITION, WINDOW),))
    held, kv = 10, 20 * POSITION
    # 14 more tokens fill the window at 2 positions each (28), then 1 each.
    budget = kv + 28 * POSITION + 100 * POSITION
    got = kv_room(kv_bytes=kv, cached_tokens=held, budget_bytes=budget,
                  context_window=100_000, layout=layout)
    assert got.by_memory == 14 + 100
    assert layout.added(held, 114) == 128 * POSITION
    assert layout.tokens_within(held, 27 * POSITION) == 13  # inside the window still
    # A cache of windows only stops growing: memory never limits it.
    stopped = kv_room(kv_bytes=kv, cached_tokens=40, budget_bytes=kv + 1,
                      context_window=100, layout=KVLayout(0, ((POSITION, WINDOW),)))
    assert (stopped.by_memory, stopped.grows, stopped.tokens) == (None, False, 60)


def test_the_engine_state_and_cache_figures_use_the_layout(gemma3):
    engine = ChatEngine(gemma3)
    try:
        done = run(engine, [Message("user", "A first question that is long enough to wrap "
                                            "the sliding window of the model.")])
        state = engine.state()
        held = state.cached_tokens
        assert held == done.stats.context_used > WINDOW
        assert state.kv_layout == KVLayout(POSITION, ((POSITION, WINDOW),))
        assert state.kv_bytes == held * POSITION + WINDOW * POSITION
        text = per_token_text(state)
        assert text.startswith(f"{POSITION} B for the next token (full-attention layers only")
    finally:
        engine.close()


def test_the_fit_check_counts_a_window_wider_than_the_minimum_context():
    # A 2,000-token window: between 512 and 2,000 tokens both kinds grow.
    layout = KVLayout(100, ((100, 2000),))
    weights = 1_000_000
    at_min = layout.bytes_at(MIN_CONTEXT)
    room_bytes = 3000 * 100  # beyond the minimum context
    fit = fit_context("m", weights, layout, 100_000,
                      Available(weights + at_min + room_bytes, "available RAM"))
    # 1,488 more tokens fill the window at 200 B each (297,600 B); the last 2,400 B
    # give 24 more at 100 B: 512 + 1,488 + 24.
    assert fit.context == 2024
    assert weights + layout.bytes_at(fit.context) <= weights + at_min + room_bytes
    assert weights + layout.bytes_at(fit.context + 1) > weights + at_min + room_bytes
