"""A launch's process, waited for at most so long, then ended with its group."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest


def communicate(proc: subprocess.Popen, timeout_s: float) -> tuple[str, str]:
    """(stdout, stderr) of ``proc`` (started with ``start_new_session``); past
    ``timeout_s`` its whole process group is killed and the test fails."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{proc.args[0]} ran past {timeout_s} s:\n{(out or '')[-2000:]}"
                    f"{(err or '')[-2000:]}")
