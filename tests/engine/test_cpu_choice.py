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


def test_one_plan_per_machine_stored_reused_by_any_model_and_measured_again_elsewhere(
        tiny_q4, tmp_path, monkeypatch):
    from mlxchat import native

    times, measured = cpu_choice.shape_times(tiny_q4)
    assert measured and times
    if sys.platform.startswith("linux"):  # the native kernel (make test builds it) is timed
        assert all(t.decode_native < cpu_choice.NEVER for t in times.values())
        assert all(t.decode_int8 < cpu_choice.NEVER for t in times.values())
    plan = cpu_choice.plan_file()
    assert plan.parent == cache_dir() / "cpu_plans"
    assert plan.stem == (native.build_key() or "no-native-kernel")
    stored = json.loads(plan.read_text())["machines"][cpu_choice.machine()]
    assert set(stored) == set(times)

    cpu_choice._MEASURED.clear()  # a new process: read from the file, nothing timed
    other_model = load_folder(write_tiny_model(tmp_path / "again", quantize_bits=4, seed=5),
                              name="again", spec="again")
    with monkeypatch.context() as patched:
        patched.setattr(cpu_choice, "measure_shape", lambda layer: pytest.fail("timed again"))
        again, measured = cpu_choice.shape_times(tiny_q4)
        assert not measured and again == times
        # Another model of the same layer shapes (another fingerprint) reuses them too.
        assert other_model.info.fingerprint != tiny_q4.info.fingerprint
        assert cpu_choice.shape_times(other_model) == (times, False)
        assert cpu_choice.apply(other_model, "auto").words().startswith(
            "auto (this machine's stored plan): ")

    cpu_choice._MEASURED.clear()  # another CPU (here: its cores) measures again
    cores = blas._cores() + 7
    monkeypatch.setattr(blas, "_cores", lambda: cores)
    moved, measured = cpu_choice.shape_times(tiny_q4)
    assert measured and set(moved) == set(times)
    machines = json.loads(plan.read_text())["machines"]
    assert any(m.startswith(f"{cores} cores") for m in machines) and len(machines) == 2

    cpu_choice._MEASURED.clear()  # another MLX version or kernel: another build, another plan
    monkeypatch.setattr(native, "build_key", lambda: "mlx9.9.9-other-build")
    assert cpu_choice.plan_file() != plan
    assert cpu_choice.shape_times(tiny_q4)[1]
    cm.clear(other_model.model)


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


def test_the_int8_kernel_is_chosen_only_in_its_mode_and_there_where_it_is_fastest():
    times = {"a": _times(decode_native=0.3, prefill_native=4.0, decode_int8=0.25,
                         prefill_int8=1.0, decode_kept=1.0),
             "b": _times(decode_native=0.3, prefill_native=2.0, decode_int8=0.35,
                         prefill_int8=2.5, decode_kept=1.0),
             "c": _times(decode_kept=0.95)}
    sizes = {"a": (2, 100), "b": (1, 100), "c": (1, 100)}
    exact, _ = cpu_choice.decide("auto", times, sizes, room=10**9)
    assert exact["a"] == exact["b"] == cm.Path(prefill=cm.NATIVE, decode=cm.NATIVE)
    paths, used = cpu_choice.decide("int8", times, sizes, room=10**9)
    assert paths["a"] == cm.Path(prefill=cm.INT8, decode=cm.INT8) and used == 0
    assert paths["b"] == cm.Path(prefill=cm.NATIVE, decode=cm.NATIVE)  # float32 is faster
    assert paths["c"] == cm.Path(prefill=cm.DEQUANTIZED)  # the kernel does not take it
    plan = cpu_choice.MatmulPlan(mode="int8", paths=paths)
    assert "int8 kernel for decode in 1 and prefill in 1 of 3" in plan.words()


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
        assert auto.stats.cpu_matmul.startswith("auto (")
        assert auto.stats.blas == blas.status().words()
        plain = run(eng, conversation(1), replace(greedy, cpu_matmul="quantized"))
        assert plain.stats.cpu_matmul.startswith("quantized: prefill through the BLAS for 0 ")
        assert not any(layer.__dict__.get("_cpu_kept") is not None
                       for _, layer in cm.quantized_layers(tiny_q4.model))
        assert eng.state().kept_copies_bytes == 0
        forced = run(eng, conversation(1), replace(greedy, cpu_matmul="dequantized"))
        assert forced.reply == plain.reply
        assert "int8" not in auto.stats.cpu_matmul
        assert auto.reply == plain.reply  # auto takes exact paths only
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
