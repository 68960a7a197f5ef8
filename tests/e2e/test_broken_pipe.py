"""`mlxchat ... | head -3`: the reader leaves early; mlxchat stops quietly, with no
traceback, like other Unix tools (issue 9, item 14)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from mlxchat import paths
from mlxchat.store import open_store


@pytest.fixture
def many_sessions() -> int:
    """Enough output to overflow a pipe's buffer: 800 sessions."""
    store = open_store()
    first = store.create_session("tiny", title="First one")
    store.close()
    with sqlite3.connect(paths.database_file()) as conn:
        conn.executemany("INSERT INTO sessions (title, created, updated) VALUES (?, 1, 1)",
                         [(f"Session number {i} about a long topic",) for i in range(800)])
    return first.id


@pytest.mark.parametrize("args", [
    ("sessions", "list", "--limit", "1000"), ("sessions", "list", "--limit", "1000", "--json"),
])
def test_a_reader_that_leaves_early_gets_no_traceback(many_sessions, args, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "mlxchat", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=os.environ.copy(), cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    head = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()  # what `head -3` does after its third line
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert all(head) and code in (0, 141), err
    assert err == ""


def test_the_full_output_is_unchanged_when_read(many_sessions):
    proc = subprocess.run([sys.executable, "-m", "mlxchat", "sessions", "list", "--json",
                           "--limit", "1000"], capture_output=True, text=True, timeout=60,
                          env=os.environ.copy())
    assert proc.returncode == 0 and proc.stderr == ""
    assert len(json.loads(proc.stdout)) == 801
