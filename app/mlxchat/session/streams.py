"""MLX streams belong to the thread that made them."""

from __future__ import annotations


def release_thread_streams() -> None:
    """Call at the end of a thread that ran MLX work (a model load). MLX wants
    each thread's streams destroyed by that thread: left to the thread's own
    teardown they can abort the process ('terminate called without an active
    exception', exit 134). Harmless in a thread that ran none."""
    import mlx.core as mx

    mx.synchronize()
    mx.clear_streams()

