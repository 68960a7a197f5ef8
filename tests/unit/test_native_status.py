"""Without a usable native kernel the app computes as before and says once, in
one line, why decode is slow and how to fix it: no build, a build for another
MLX version or other sources (a fake key stands for the other version), no
compiler. On macOS nothing is built or said; MLXCHAT_NATIVE=0 is the user's
choice. The build made from the source tree (by `make test`) is found."""

from __future__ import annotations

import io
import json
import sys

import pytest

from mlxchat import native
from mlxchat.native import build


@pytest.fixture
def fresh(monkeypatch):
    """A process that has not looked for the kernel yet."""
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.delenv(native.OFF, raising=False)


def test_the_decision_says_why_and_how_to_fix_it_in_one_line():
    stale = native.decide("linux", "", built=False, others=["mlx0.31.0-py311-x"], compiler="g++",
                          mlx="0.32.4")
    assert not stale.available and native.FIX in stale.note
    assert "built for MLX 0.31.0, not 0.32.4" in stale.note
    edited = native.decide("linux", "", built=False, others=["mlx0.32.4-py311-x"],
                           compiler="g++", mlx="0.32.4")
    assert "built from other sources" in edited.note
    missing = native.decide("linux", "", built=False, others=[], compiler="g++ 12")
    assert "not built" in missing.note and "compiler" not in missing.note
    bare = native.decide("linux", "", built=False, others=[], compiler=None)
    assert "no C++ compiler" in bare.note
    for status in (stale, edited, missing, bare):
        assert "\n" not in status.note and status.note.startswith("decode runs on")
    assert native.decide("linux", "", built=True, others=[], compiler=None) is None
    assert native.decide("darwin", "", built=False, others=[], compiler=None).note == ""
    assert native.decide("linux", "0", built=True, others=[], compiler="g++").note == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="built on Linux only")
def test_the_build_from_the_source_tree_is_found_and_loads(fresh):
    built = build.find_built()
    assert built is not None  # `make test` built it (make model)
    record = json.loads((built.parent / build.RECORD).read_text())
    assert record["key"] == build.key() and record["mlx"] == build.mlx_version()
    assert native.status().available and native.status().note == ""
    assert native.module().qmm_isa() in ("avx512", "avx2", "generic")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="built on Linux only")
def test_a_build_for_another_mlx_is_not_loaded_and_said_once(fresh, monkeypatch):
    real = build.key()
    # This process's key as another MLX version would make it: the build on
    # disk (made for the installed MLX) no longer matches.
    monkeypatch.setattr(build, "key", lambda mlx=None: "mlx0.0.1-py311-linux-fake-f1")
    monkeypatch.setattr(build, "mlx_version", lambda: "0.0.1")
    assert build.find_built() is None and real in build.other_builds()
    assert native.module() is None
    status = native.status()
    assert not status.available and "built for MLX 0.32" in status.note
    assert status.note.endswith(native.FIX)
    err = io.StringIO()
    native.warn_once(err)
    native.warn_once(err)
    lines = err.getvalue().splitlines()
    assert lines == [f"mlxchat: {status.note}"]


def test_sources_and_mlx_version_key_the_build(tmp_path, monkeypatch):
    assert build.key("0.32.4") != build.key("0.33.0")
    before = build.key()
    copy = tmp_path / "src"
    copy.mkdir()
    for f in build.SOURCES.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(build, "SOURCES", copy)
    assert build.key() == before
    (copy / "qmm.cpp").write_text((copy / "qmm.cpp").read_text() + "\n// changed\n")
    assert build.key() != before


def test_off_and_macos_build_nothing_and_say_nothing(fresh, monkeypatch):
    monkeypatch.setenv(native.OFF, "0")
    assert native.module() is None and native.status().note == ""
    monkeypatch.setattr(build.sys, "platform", "darwin")
    with pytest.raises(RuntimeError, match="not built on macOS"):
        build.build()
