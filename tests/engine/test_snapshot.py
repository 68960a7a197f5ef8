"""Whole-cache KV snapshots (sessions saved before KV segments): a faithful
round trip, and every damaged or mismatched file falls back to a cold prefill
with the reason. The files are written as old mlxchat wrote them."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx_lm.models.cache import load_prompt_cache, make_prompt_cache

from mlxchat.chat import Message
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.disk import snapshot
from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model

from .conftest import GREEDY, run
from tests.old_snapshots import write_old_snapshot


@pytest.fixture
def saved(tiny, tmp_path):
    """A two-turn conversation, its live engine and its snapshot file."""
    engine = ChatEngine(tiny)
    msgs = [Message("system", "Terse."), Message("user", "Tell me a story about a cat.")]
    first = run(engine, msgs)
    msgs += [Message("assistant", first.reply), Message("user", "And a dog?")]
    info = write_old_snapshot(engine, tmp_path / "s.safetensors")
    yield engine, msgs, info
    engine.close()


def next_logits(model, cache, token: int) -> mx.array:
    return model(mx.array([[token]]), cache=cache)[0, -1]


def test_round_trip_gives_same_next_token_logits(tiny, saved):
    engine, _, info = saved
    live = engine.live_view().cache()
    loaded = snapshot.load(info.path, fingerprint=tiny.info.fingerprint,
                           template_hash=tiny.info.chat_template_hash,
                           num_layers=len(live), expected_checksum=info.checksum)
    assert loaded.tokens == engine.cached_tokens
    a = next_logits(tiny.model, live, 42)
    b = next_logits(tiny.model, loaded.cache, 42)
    assert mx.allclose(a, b, atol=1e-5).item()
    # And both match a full recompute of the cached tokens.
    fresh = make_prompt_cache(tiny.model)
    tiny.model(mx.array([loaded.tokens]), cache=fresh)
    c = next_logits(tiny.model, fresh, 42)
    assert mx.allclose(a, c, atol=1e-3).item()


def test_file_is_about_the_live_size(saved):
    engine, _, info = saved
    live = engine.state().kv_bytes
    assert info.bytes <= live * 1.05 + 64 * 1024  # header + token list
    assert info.tokens == engine.state().cached_tokens


def _rewrite_metadata(path, **changes):
    arrays, meta = mx.load(str(path), return_metadata=True)
    # save_prompt_cache flattens [user metadata, classes, scalars] into "0.key".
    meta.update({f"0.{k}": v for k, v in changes.items()})
    mx.save_safetensors(str(path), arrays, meta)


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_data_byte(path):
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "missing": (lambda p: p.unlink(), "file missing"),
    "truncated": (_truncate, "checksum mismatch"),
    "corrupt": (_flip_data_byte, "checksum mismatch"),
    "other mlx-lm": (lambda p: _rewrite_metadata(p, mlx_lm_version="0.0.1"),
                     "checksum mismatch"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_snapshot_falls_back_cold(tiny, saved, case):
    engine, msgs, info = saved
    damage, reason = DAMAGE[case]
    damage(__import__("pathlib").Path(info.path))
    expected = run(engine, msgs).reply  # warm reference
    fresh = ChatEngine(tiny)
    try:
        result = fresh.load_snapshot(info.path, expected_checksum=info.checksum,
                                     conversation=msgs[:-1])
        assert not result.ok and result.reason.startswith(reason)
        done = run(fresh, msgs)
        assert done.stats.cache_source == "cold" and done.stats.reused_tokens == 0
        assert done.stats.miss_reason == f"snapshot rejected: {result.reason}"
        assert done.reply == expected
    finally:
        fresh.close()


@pytest.mark.parametrize("case,reason", [
    ("truncated", "unreadable file"),
    ("corrupt", "data damaged"),
    ("other mlx-lm", "written by mlx-lm 0.0.1"),
])
def test_damage_is_caught_without_the_stored_checksum(tiny, saved, case, reason):
    _, msgs, info = saved
    DAMAGE[case][0](__import__("pathlib").Path(info.path))
    fresh = ChatEngine(tiny)
    try:
        result = fresh.load_snapshot(info.path, conversation=msgs[:-1])
        assert not result.ok and result.reason.startswith(reason)
    finally:
        fresh.close()


def test_other_model_and_other_template_are_rejected(tiny, saved, tmp_path):
    _, msgs, info = saved
    other = load_folder(write_tiny_model(tmp_path / "other", seed=1))
    same_weights_new_template = load_folder(write_tiny_model(
        tmp_path / "tmpl", chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}"))
    for loaded, reason in [(other, "made with other model weights"),
                           (same_weights_new_template, "made with another chat template")]:
        eng = ChatEngine(loaded)
        try:
            result = eng.load_snapshot(info.path, expected_checksum=info.checksum)
            assert (result.ok, result.reason) == (False, reason)
            assert run(eng, msgs).stats.miss_reason == f"snapshot rejected: {reason}"
        finally:
            eng.close()


def test_snapshot_metadata_names_its_dependencies(tiny, saved):
    _, _, info = saved
    _, meta = load_prompt_cache(info.path, return_metadata=True)
    assert meta["model_fingerprint"] == tiny.info.fingerprint
    assert meta["template_hash"] == tiny.info.chat_template_hash
    assert meta["mlx_lm_version"] == info.mlx_lm_version
    assert len(json.loads(meta["tokens"])) == info.tokens


def test_empty_cache_is_not_saved(engine, tmp_path):
    """Only segments are written now: an empty cache has no new tokens to save."""
    with pytest.raises(ValueError, match="nothing new"):
        engine.save_segment(tmp_path / "x.safetensors", 0)
    assert not (tmp_path / "x.safetensors").exists()
    assert GREEDY.max_tokens > 0
