"""`mlxchat` with no terminal refuses at once instead of spinning."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("stdin_tty", [False, True], ids=["stdin-devnull", "stdout-pipe-only"])
def test_the_chat_ui_without_a_terminal_is_one_line_and_exit_1(stdin_tty):
    # stdout is always a pipe here; with stdin_tty the stdin is a pty, so only
    # stdout lacks a terminal.
    if stdin_tty:
        master, slave = os.openpty()
        stdin = slave
    else:
        master = None
        stdin = subprocess.DEVNULL
    try:
        proc = subprocess.run([sys.executable, "-m", "mlxchat"], stdin=stdin,
                              capture_output=True, text=True, timeout=30,
                              env=os.environ.copy())
    finally:
        if master is not None:
            os.close(master)
            os.close(slave)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mlxchat: error: ") and "terminal" in lines[0]
    assert "mlxchat ask" in lines[0]
    assert proc.stdout == ""
