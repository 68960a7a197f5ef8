"""/set compute_dtype: a session's own dtype, a new token ledger, gauges that follow."""

from __future__ import annotations

import pytest

from mlxchat.commands import CommandContext
from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model

from tests.commands.conftest import NOW, make_conversation, send


@pytest.fixture
def own(tmp_path, home, registry):
    """A conversation on a tiny model of its own: the test casts its arrays."""
    loaded = load_folder(write_tiny_model(tmp_path / "m"), name="tiny", spec="tiny",
                         available=None)
    conv = make_conversation(tmp_path, loaded)
    ctx = CommandContext(conv, clipboard=lambda _: None, config_path=tmp_path / "c.toml",
                         now=lambda: NOW, cwd=lambda: tmp_path, exports_dir=tmp_path / "x",
                         interactive=False)
    yield conv, ctx
    conv.close()
    conv.store.close()


def model_table(registry, ctx) -> str:
    return str(registry.run("/model", ctx).rows)


def last_key(conv) -> str:
    return [m.ledger_key for m in conv.messages if m.ledger_key][-1]


def test_session_compute_dtype(own, registry):
    conv, ctx = own
    first = send(conv, "hello there")
    state = conv.engine.state()
    assert (state.compute_dtype, state.kv_dtype) == ("float32", "fp32")
    assert "computes in float32" in model_table(registry, ctx)
    kv_fp32 = state.kv_bytes
    key = last_key(conv)

    result = registry.run("/set compute_dtype float16", ctx)
    assert result.ok and "computes in float16" in result.text
    second = send(conv, "and again")
    state = conv.engine.state()
    assert (state.compute_dtype, state.kv_dtype) == ("float16", "fp16")
    assert second.stats.miss_reason.startswith("compute dtype changed")
    assert last_key(conv) != key
    assert 0 < state.kv_bytes < kv_fp32 * (second.stats.context_used / first.stats.context_used)
    shown = model_table(registry, ctx)
    assert "computes in float16 (this session; default float32)" in shown

    assert registry.run("/set compute_dtype auto", ctx).ok
    send(conv, "back")
    assert conv.engine.state().compute_dtype == "float32"
    assert last_key(conv).split(":")[2] == key.split(":")[2]


def test_bad_compute_dtype_changes_nothing(own, registry):
    conv, ctx = own
    result = registry.run("/set compute_dtype float8", ctx)
    assert not result.ok and "auto, float32, bfloat16, float16" in result.text
    assert conv.generation.compute_dtype is None
