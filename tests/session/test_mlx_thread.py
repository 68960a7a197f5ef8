"""MlxThread: one long-lived thread for MLX work, its streams released at stop."""

from __future__ import annotations

import threading

import mlx.core as mx
import pytest

from mlxchat.errors import user_message
from mlxchat.session import mlx_thread
from mlxchat.session.mlx_thread import MlxThread, MlxThreadStopped


def mlx_sum() -> tuple[str, float]:
    """Real MLX work, and the thread that ran it."""
    return threading.current_thread().name, (mx.arange(4, dtype=mx.float32) * 2).sum().item()


@pytest.fixture
def thread():
    t = MlxThread("test-mlx")
    yield t
    t.stop(timeout=10)


def test_work_runs_in_order_on_one_thread_and_returns_its_result(thread):
    assert not thread.alive()  # started by the first job, not before
    first, second = thread.submit(mlx_sum), thread.submit(mlx_sum)
    assert first.result(10) == second.result(10) == ("test-mlx", 12.0)
    assert thread.alive() and not threading.current_thread().name == "test-mlx"
    order: list[int] = []
    futures = [thread.submit(lambda i=i: order.append(i)) for i in range(5)]
    for fut in futures:
        fut.result(10)
    assert order == [0, 1, 2, 3, 4]


def test_an_exception_reaches_the_caller_and_the_thread_goes_on(thread):
    def fails() -> None:
        raise ValueError("bad shape")
    with pytest.raises(ValueError, match="bad shape"):
        thread.call(fails)
    assert thread.call(mlx_sum) == ("test-mlx", 12.0)


def test_call_from_a_job_runs_at_once_instead_of_waiting_for_itself(thread):
    assert thread.call(lambda: thread.call(mlx_sum)) == ("test-mlx", 12.0)


def test_stop_finishes_queued_work_then_releases_the_streams_on_the_thread(
        thread, monkeypatch):
    seen: dict[str, str] = {}
    real_release = mlx_thread.release_thread_streams

    def release_and_probe() -> None:
        real_release()
        seen["released on"] = threading.current_thread().name
        try:  # MLX on a thread whose streams were released fails
            mx.ones(2).sum().item()
            seen["after"] = "MLX still ran"
        except RuntimeError as exc:
            seen["after"] = str(exc)
    monkeypatch.setattr(mlx_thread, "release_thread_streams", release_and_probe)
    gate = threading.Event()
    running = thread.submit(lambda: gate.wait(10))
    queued = thread.submit(mlx_sum)
    stopper = threading.Thread(target=thread.stop)
    stopper.start()
    gate.set()
    stopper.join(10)
    assert running.result(0) is True and queued.result(0) == ("test-mlx", 12.0)
    assert seen["released on"] == "test-mlx"
    assert "There is no Stream" in seen["after"]
    assert not thread.alive()


def test_a_stopped_thread_refuses_work_in_one_line(thread):
    thread.call(mlx_sum)
    thread.stop()
    thread.stop()  # twice is harmless
    with pytest.raises(MlxThreadStopped) as refused:
        thread.submit(mlx_sum)
    text = user_message(refused.value)
    assert text is not None and "\n" not in text and "test-mlx" in text


def test_a_thread_never_used_starts_nothing_and_stops_at_once():
    unused = MlxThread("never-used")
    unused.stop()
    assert not unused.alive()
    assert "never-used" not in [t.name for t in threading.enumerate()]
    with pytest.raises(MlxThreadStopped):
        unused.call(mlx_sum)


def test_the_thread_is_not_a_daemon(thread):
    # At exit the interpreter waits for it (its streams released by stop)
    # rather than killing it mid-load.
    thread.call(mlx_sum)
    named = [t for t in threading.enumerate() if t.name == "test-mlx"]
    assert len(named) == 1 and not named[0].daemon
