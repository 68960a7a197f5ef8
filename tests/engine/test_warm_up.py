"""``warm_up`` (``mlxchat serve`` before it listens) computes once under the
compute lock on a cache of its own: the live cache, and so the next turn's
reuse and reply, are exactly as they were."""

from __future__ import annotations

import mlx.core as mx

from mlxchat.engine.core import ChatEngine
from mlxchat.engine.thread.compute import ComputeLock

from tests.engine.conftest import conversation, run


def test_warm_up_computes_apart_and_leaves_the_live_cache_alone(tiny):
    lock = ComputeLock()
    warmed, plain = ChatEngine(tiny, compute=lock), ChatEngine(tiny)
    try:
        first = run(warmed, conversation(1))
        run(plain, conversation(1))
        before, holds = warmed.live_view(), lock.figures().holds
        mx.random.seed(7)
        state = mx.random.state[0]
        warmed.warm_up()
        assert lock.figures().holds == holds + 1  # it computed, under the lock
        assert mx.array_equal(mx.random.state[0], state)  # the sampler's state untouched
        after = warmed.live_view()
        assert after == before
        for a, b in zip(after.cache(), before.cache()):
            assert all(mx.array_equal(x, y) for x, y in zip(a.state, b.state))
        history = conversation(2, [first.reply])
        again, same = run(warmed, history), run(plain, history)
        assert again.stats.cache_source == "warm"
        assert again.stats.reused_tokens == same.stats.reused_tokens > 0
        assert again.reply == same.reply and again.token_ids == same.token_ids
    finally:
        warmed.close()
        plain.close()



def test_after_warm_up_a_sessions_first_render_compiles_no_template(tiny):
    """The template is compiled once (at warm-up); each session's clock only
    binds it anew, so a restarted server's first request compiles nothing."""
    import time

    from mlxchat.chat import Message
    from mlxchat.engine.prompt import jinja
    from mlxchat.engine.prompt.render import render

    assert jinja._jinja_source(tiny.tokenizer) is not None  # a Jinja template to compile
    engine = ChatEngine(tiny)
    try:
        engine.warm_up()
    finally:
        engine.close()
    compiled = jinja._code.cache_info().misses
    later = jinja.SessionClock(time.time() - 86400.0)  # another session, another day
    ids = render(tiny.tokenizer, [Message("user", "Hi.")], strftime_now=later)
    assert ids and jinja._code.cache_info().misses == compiled
