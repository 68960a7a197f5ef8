"""The compact KV gauge names the cache's real type before and during the first
turn: the float type the model computes in, or the session's quantized width."""

from __future__ import annotations

from dataclasses import replace

from textual.widgets import Static

from mlxchat.generation import GenerationSettings

from .app_support import ready, settle, tiny_app, tiny_settings, until

FLOAT_LABELS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def compact(app) -> str:
    return app.gauges.query_one("#compact-context", Static).render().plain


async def first_turn_labels(app, pilot) -> tuple[str, list[str], str]:
    """The compact line before the first turn, each one drawn while it runs, after."""
    await ready(pilot)
    before = compact(app)
    seen: list[str] = []
    live_cache = app.gauges.live_cache

    def record(cached_tokens: int, kv_bytes: int) -> None:
        live_cache(cached_tokens, kv_bytes)
        seen.append(compact(app))
    app.gauges.live_cache = record
    app.prompt.text = "Tell me about the sea, " * 12
    app.simulate_key("enter")
    await until(lambda: app.generating)
    await settle(pilot)
    return before, seen, compact(app)


async def test_an_unquantized_cache_is_named_by_its_float_type_from_the_start(tmp_path, tiny):
    app = tiny_app(tmp_path / "s.db", tiny, settings=tiny_settings(max_tokens=24))
    async with app.run_test(size=(80, 24)) as pilot:
        before, during, after = await first_turn_labels(app, pilot)
        # What the cache arrays hold, read from them after the turn.
        dtypes = {layer.dtype for layer in app.conversation.engine.live_view().layers}
    assert len(dtypes) == 1
    label = FLOAT_LABELS[dtypes.pop()]
    assert during, "no live gauge update while the turn ran"
    for line in [before, *during, after]:
        assert f" {label} " in line and "native" not in line, line


async def test_a_quantized_session_names_its_width_before_the_first_turn(tmp_path, tiny64):
    settings = replace(tiny_settings(), model=tiny64.info.spec,
                       generation=GenerationSettings(temperature=0.0, max_tokens=24, kv_bits=8))
    app = tiny_app(tmp_path / "s.db", tiny64, settings=settings)
    async with app.run_test(size=(80, 24)) as pilot:
        before, during, after = await first_turn_labels(app, pilot)
        view = app.conversation.engine.live_view()
    assert view.bits == 8 and view.length > 0  # the turn did quantize the cache
    assert during
    for line in [before, *during, after]:
        assert " 8-bit " in line and "fp32" not in line, line
