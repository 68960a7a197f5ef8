"""Waiting on another thread in a test: bounded, so a broken promise fails
instead of hanging."""

from __future__ import annotations

import time

BOUND_S = 30.0


def until(condition, bound_s: float = BOUND_S) -> None:
    """Return once ``condition()`` is true; AssertionError after ``bound_s``."""
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)
