"""The live cache's read-only view: what the engine reports of its cache, and
copies of its layers that later turns (or a model run on them) leave alone."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine

from .conftest import run


def test_the_view_agrees_with_the_engine_and_stays_as_it_was(tiny):
    engine = ChatEngine(tiny)
    try:
        cold = engine.live_view()
        assert (cold.tokens, cold.length, cold.nbytes, cold.bits) == ((), 0, 0, None)
        assert cold.dtype == "fp32" and cold.trimmable
        msgs = [Message("user", "Tell me about pelicans.")]
        first = run(engine, msgs)
        view = engine.live_view()
        state = engine.state()
        assert list(view.tokens) == engine.cached_tokens and view.length == len(view.tokens)
        assert (view.nbytes, view.bits, view.dtype) == (state.kv_bytes, state.kv_bits,
                                                        state.kv_dtype)
        assert [layer.kind for layer in view.layers] == ["KVCache"] * len(tiny.model.layers)
        assert {layer.length for layer in view.layers} == {view.length}
        assert sum(layer.nbytes for layer in view.layers) == view.nbytes
        assert all(layer.sliceable and layer.trimmable and layer.dtype == "float32"
                   for layer in view.layers)
        # The copies predict the next token as a recompute of the same tokens does.
        copies = view.cache()
        fresh = make_prompt_cache(tiny.model)
        tiny.model(mx.array([list(view.tokens)]), cache=fresh)
        a = tiny.model(mx.array([[42]]), cache=copies)[0, -1]
        b = tiny.model(mx.array([[42]]), cache=fresh)[0, -1]
        assert mx.allclose(a, b, atol=1e-3).item()
        # Neither that run nor a later turn changed the view or the engine.
        assert view.cache()[0].offset == view.length == len(engine.cached_tokens)
        msgs += [Message("assistant", first.reply), Message("user", "And herons?")]
        run(engine, msgs)
        assert engine.live_view().length > view.length
        assert [c.offset for c in view.cache()] == [view.length] * len(view.layers)
        assert engine.draft_view() is None
    finally:
        engine.close()
