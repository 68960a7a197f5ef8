"""Files the user names are read only when regular and within a stated limit,
never blocking and never unbounded (issue 9, items 9 and 13)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from mlxchat.store import StoreError, open_store
from mlxchat.store.importing import IMPORT_LIMIT_BYTES, import_json


def limited_memory() -> None:
    # Should the file be read whole after all, fail in this child, not on the machine.
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def mlxchat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlxchat", *args], capture_output=True,
                          text=True, timeout=60, env=os.environ.copy(),
                          preexec_fn=limited_memory)


def assert_one_line(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 1, proc.stderr[-500:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-500:]
    assert needle in lines[0]


def test_sessions_import_refuses_a_device():
    assert_one_line(mlxchat("sessions", "import", "/dev/zero"), "not a regular file")


def test_sessions_import_refuses_a_fifo_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert_one_line(mlxchat("sessions", "import", str(fifo)), "not a regular file")


def test_an_import_over_the_limit_is_refused_before_reading(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(IMPORT_LIMIT_BYTES + 1)  # sparse: nothing to read if refused
    store = open_store(tmp_path / "s.db")
    with pytest.raises(StoreError, match="over the .* limit"):
        import_json(store, big)
    assert store.list_sessions() == []
    store.close()


def test_attach_reads_a_file_whose_size_on_disk_is_zero(registry, ctx, conv):
    result = registry.run("/attach /proc/self/status", ctx)
    assert result.ok, result.text
    assert "Name:" in conv.turns.attachments[0].text
