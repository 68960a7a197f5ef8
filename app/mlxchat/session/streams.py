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


def ready_thread_streams() -> None:
    """Call before MLX work on a thread that may have released its streams:
    Textual runs each worker on one of asyncio's pooled threads, reused by the
    next worker, and a released thread has no default stream ('There is no
    Stream(cpu, 0) in current thread'). Gives it a new one (this thread's only;
    released again at the worker's end). Cheap when it has one."""
    import mlx.core as mx

    try:
        mx.eval(mx.zeros((1,)))
    except RuntimeError:
        mx.set_default_stream(mx.new_stream(mx.default_device()))
