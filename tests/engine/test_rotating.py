"""Sliding-window layers (RotatingKVCache): follow-ups still reuse the cache; once
it has wrapped it cannot be trimmed, and an edit says so and recomputes."""

from __future__ import annotations

import pytest
from mlx_lm.models.cache import RotatingKVCache

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model

from .conftest import run
from tests.old_snapshots import write_old_snapshot


@pytest.fixture(scope="module")
def sliding(tmp_path_factory):
    return load_folder(write_tiny_model(tmp_path_factory.mktemp("sliding"), sliding_window=32))


def test_rotating_cache_reuses_follow_ups_and_recomputes_edits(sliding, tmp_path):
    engine = ChatEngine(sliding)
    try:
        assert any(isinstance(c, RotatingKVCache) for c in engine.live_view().cache())
        msgs = [Message("user", "A first question that is long enough to wrap.")]
        first = run(engine, msgs)
        msgs += [Message("assistant", first.reply), Message("user", "Next?")]
        second = run(engine, msgs)
        assert second.stats.reused_tokens == first.stats.context_used
        assert second.stats.miss_reason is None
        # Editing the first message needs a trim the wrapped cache cannot do.
        edited = [Message("user", "A different first question, also long enough.")]
        e = run(engine, edited)
        assert e.stats.miss_reason == "cache not trimmable"
        assert e.stats.reused_tokens == 0 and e.stats.cache_source == "cold"
        fresh = ChatEngine(sliding)
        assert run(fresh, edited).reply == e.reply
        # A snapshot of a rotating cache round-trips too.
        info = write_old_snapshot(engine, tmp_path / "r.safetensors")
        assert fresh.load_snapshot(info.path, expected_checksum=info.checksum,
                                   conversation=edited + [Message("assistant", e.reply)]).ok
        follow = edited + [Message("assistant", e.reply), Message("user", "And?")]
        resumed = run(fresh, follow)
        assert resumed.stats.cache_source == "snapshot" and resumed.stats.reused_tokens > 0
        assert resumed.reply == run(engine, follow).reply
        fresh.close()
    finally:
        engine.close()
