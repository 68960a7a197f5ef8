"""cpu_matmul: the measured choice is stored with the model and reused, a changed
machine measures again, the setting is checked and reaches the turn's stats,
and kept copies never go past the memory fit."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from mlxchat import blas
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.turn import cpu_choice
from mlxchat.generation import GenerationSettings
from mlxchat.models import cpu_matmul as cm
from mlxchat.models.loader import load_folder
from mlxchat.models.testing.text import write_tiny_model
from mlxchat.paths import cache_dir

from .conftest import conversation, run


@pytest.fixture(scope="module")
def tiny_q4(tmp_path_factory):
    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-q4"), quantize_bits=4),
                       name="tiny-q4", spec="tiny-q4")


@pytest.fixture(autouse=True)
def fresh_figures():
    cpu_choice._MEASURED.clear()
    yield
    cpu_choice._MEASURED.clear()


def test_measured_once_stored_and_reused_then_measured_again_on_another_machine(
        tiny_q4, monkeypatch):
    times, measured = cpu_choice.shape_times(tiny_q4)
    assert measured and times
    if sys.platform.startswith("linux"):  # the native kernel (make test builds it) is timed
        assert all(t.decode_native < cpu_choice.NEVER for t in times.values())
    stored = json.loads((cache_dir() / "cpu_matmul.json").read_text())
    entry = stored["models"][tiny_q4.info.fingerprint]
    assert entry["machine"] == cpu_choice.machine()
    assert set(entry["shapes"]) == set(times)

    cpu_choice._MEASURED.clear()  # a new process: read from the file
    again, measured = cpu_choice.shape_times(tiny_q4)
    assert not measured and again == times

    cpu_choice._MEASURED.clear()
    other = blas._cores() + 7
    monkeypatch.setattr(blas, "_cores", lambda: other)
    moved, measured = cpu_choice.shape_times(tiny_q4)
    assert measured and set(moved) == set(times)
    stored = json.loads((cache_dir() / "cpu_matmul.json").read_text())
    assert stored["models"][tiny_q4.info.fingerprint]["machine"].startswith(f"{other} cores")


def _times(**kw) -> cpu_choice.ShapeTimes:
    base = dict(decode_quantized=1.0, decode_kept=0.2, prefill_quantized=100.0,
                prefill_dequantized=5.0, prefill_kept=3.0)
    return cpu_choice.ShapeTimes(**{**base, **kw})


def test_kept_copies_stay_within_the_room_and_go_where_they_save_most():
    times = {"a": _times(), "b": _times(decode_kept=0.9), "c": _times(decode_kept=0.95,
                                                                         prefill_dequantized=200)}
    sizes = {"a": (2, 100), "b": (1, 100), "c": (1, 100)}
    paths, used = cpu_choice.decide("auto", times, sizes, room=250)
    assert paths["a"] == cm.Path(prefill=cm.KEPT, decode=cm.KEPT) and used == 200
    assert paths["b"] == cm.Path(prefill=cm.DEQUANTIZED)  # did not fit; chunk path still pays
    assert paths["c"] == cm.Path()  # neither pays: quantized_matmul
    paths, used = cpu_choice.decide("auto", times, sizes, room=0)
    assert used == 0 and not any(p.keeps for p in paths.values())
    paths, _ = cpu_choice.decide("quantized", times, sizes, room=10**9)
    assert all(p == cm.Path() for p in paths.values())
    paths, _ = cpu_choice.decide("dequantized", times, sizes, room=100)
    assert all(p.prefill != cm.QUANTIZED for p in paths.values())


def test_the_native_kernel_serves_decode_and_copies_are_kept_only_where_they_beat_it():
    times = {"a": _times(decode_native=0.1, prefill_native=4.0),
             "b": _times(decode_native=0.5), "c": _times(decode_kept=0.95)}
    sizes = {"a": (2, 100), "b": (1, 100), "c": (1, 100)}
    paths, used = cpu_choice.decide("auto", times, sizes, room=10**9)
    assert paths["a"] == cm.Path(prefill=cm.NATIVE, decode=cm.NATIVE)  # no copy for it
    assert paths["b"] == cm.Path(prefill=cm.KEPT, decode=cm.KEPT)  # 0.2 beats 0.5 by a tenth
    assert paths["c"] == cm.Path(prefill=cm.DEQUANTIZED)  # no kernel: as before
    assert used == 100
    plan = cpu_choice.MatmulPlan(mode="auto", paths=paths, kept_bytes=used)
    assert "native kernel for decode in 1 and prefill in 1 of 3" in plan.words()
    forced, used = cpu_choice.decide("native", times, sizes, room=10**9)
    assert used == 0 and forced["c"] == cm.Path()  # no kernel time: quantized_matmul
    assert forced["a"] == forced["b"] == cm.Path(prefill=cm.NATIVE, decode=cm.NATIVE)


def test_the_budget_leaves_the_kv_cache_at_the_whole_context(tiny_q4, monkeypatch):
    from mlxchat.models import memory

    monkeypatch.setattr(memory, "available_memory",
                        lambda: memory.Available(bytes=2 << 30, source="available RAM"))
    big_kv = replace(tiny_q4, info=replace(tiny_q4.info, needed_bytes=tiny_q4.info.weights_bytes
                                           + (2 << 30)))
    assert cpu_choice.budget(big_kv, held=0) == 0
    assert cpu_choice.budget(tiny_q4, held=0) > 0


def test_the_setting_is_checked_and_named_in_the_turn_stats(tiny_q4):
    with pytest.raises(ValueError, match="cpu_matmul must be auto, quantized, dequantized"):
        GenerationSettings(cpu_matmul="fast").check()
    eng = ChatEngine(tiny_q4)
    try:
        greedy = GenerationSettings(temperature=0.0, max_tokens=8)
        auto = run(eng, conversation(1), greedy)
        assert auto.stats.cpu_matmul.startswith("auto: ")
        assert auto.stats.blas == blas.status().words()
        plain = run(eng, conversation(1), replace(greedy, cpu_matmul="quantized"))
        assert plain.stats.cpu_matmul.startswith("quantized: prefill through the BLAS for 0 ")
        assert not any(layer.__dict__.get("_cpu_kept") is not None
                       for _, layer in cm.quantized_layers(tiny_q4.model))
        assert eng.state().kept_copies_bytes == 0
        forced = run(eng, conversation(1), replace(greedy, cpu_matmul="dequantized"))
        assert forced.reply == plain.reply == auto.reply
        # What the process holds for the model counts the copies, from their arrays.
        copies = [layer.__dict__["_cpu_kept"] for _, layer in cm.quantized_layers(tiny_q4.model)
                  if layer.__dict__.get("_cpu_kept") is not None]
        assert copies and eng.state().kept_copies_bytes == sum(c.nbytes for c in copies)
        assert eng.state().weights_bytes == tiny_q4.info.weights_bytes
    finally:
        eng.close()
        cm.clear(tiny_q4.model)


def test_a_turn_that_sets_up_the_layers_says_so_before_its_prefill(tiny_q4, tiny):
    eng = ChatEngine(tiny_q4)
    try:
        def first_events(settings):
            events = list(eng.turn(conversation(1), settings))
            return [type(e).__name__ for e in events[:2]], events[0]
        kinds, first = first_events(GenerationSettings(temperature=0.0, max_tokens=2))
        assert kinds == ["Preparing", "PrefillProgress"]
        assert first.what == "measuring this CPU's matmul paths (once per model)"
        kinds, _ = first_events(GenerationSettings(temperature=0.0, max_tokens=2))
        assert kinds[0] == "PrefillProgress"  # matched already: nothing to wait for
        kinds, first = first_events(GenerationSettings(temperature=0.0, max_tokens=2,
                                                       cpu_matmul="dequantized"))
        assert first.what == "setting up the model's layers for this CPU"  # measured before
    finally:
        eng.close()
        cm.clear(tiny_q4.model)
    plain = ChatEngine(tiny)  # float32: no quantized layer to set up
    try:
        events = list(plain.turn(conversation(1), GenerationSettings(temperature=0.0,
                                                                     max_tokens=2)))
        assert type(events[0]).__name__ == "PrefillProgress"
    finally:
        plain.close()
