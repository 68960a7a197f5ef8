"""The BLAS that serves MLX's float32 matmuls on Linux is an optimized one,
loaded before MLX by importing mlxchat, and checked where the symbol resolves."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mlxchat import blas

PROBE = ("import json, mlxchat, mlxchat.blas as b, mlx.core as mx; s = b.status(); "
         "print(json.dumps({'name': s.name, 'optimized': s.optimized, 'note': s.note, "
         "'threads': s.threads, 'serving': b.serving_library(), "
         "'mlx': mx.__file__}))")


def _probe(**env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=60, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux CPU wheel only")
def test_mlx_matmuls_are_served_by_an_optimized_blas():
    if not blas._candidates():
        pytest.skip("no optimized BLAS installed here (make test installs one)")
    found = _probe(MLXCHAT_BLAS="")  # searched for, whatever this run was told
    assert found["optimized"], found["note"]
    serving = found["serving"]
    assert serving and ("openblas" in serving.lower() or "mkl" in serving.lower())
    assert "mlx_cpu.libs" not in serving  # not the wheel's reference BLAS
    assert found["threads"] and found["threads"] >= 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux CPU wheel only")
def test_without_one_it_says_why_and_how_to_fix_it():
    found = _probe(MLXCHAT_BLAS="none")
    assert not found["optimized"] and found["serving"] is None
    assert "reference BLAS" in found["note"] and "apt-get install" in found["note"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux CPU wheel only")
def test_a_library_that_does_not_load_is_reported_not_raised():
    found = _probe(MLXCHAT_BLAS="/nonexistent/libopenblas.so.0")
    assert not found["optimized"] and "/nonexistent/libopenblas.so.0" in found["note"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux CPU wheel only")
def test_the_cli_says_why_it_is_slow_when_a_model_loads_and_never_before_bad_input(
        tiny_model_dir, tmp_path):
    """A missing BLAS is said once on stderr as a model loads; a refusal of bad
    input (no such session, no such model) stays one line; MLXCHAT_BLAS=none is
    the user's own choice and is not said."""
    def stderr(*argv: str, **env: str) -> list[str]:
        out = subprocess.run([sys.executable, "-m", "mlxchat", *argv], capture_output=True,
                             text=True, timeout=120,
                             env={**os.environ, "MLXCHAT_HOME": str(tmp_path), **env})
        return out.stderr.splitlines()
    missing = "/nonexistent/libopenblas.so.0"
    for bad in (("sessions", "show", "999"), ("ask", "--model", "nosuch", "hi")):
        refused = stderr(*bad, MLXCHAT_BLAS=missing)
        assert len(refused) == 1 and refused[0].startswith("mlxchat: error: "), refused
    loaded = stderr("ask", "--model", str(tiny_model_dir), "--max-tokens", "2", "hi",
                    MLXCHAT_BLAS=missing)
    assert sum(missing in line for line in loaded) == 1, loaded
    chosen = stderr("ask", "--model", str(tiny_model_dir), "--max-tokens", "2", "hi",
                    MLXCHAT_BLAS="none")
    assert not any("BLAS" in line for line in chosen), chosen
