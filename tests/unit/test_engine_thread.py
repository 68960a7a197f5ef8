"""An engine's thread refuses work once closed, in one line, instead of
leaving its caller waiting for a job that will never run (a /model load that
ended after quitting hung the process at exit)."""

from __future__ import annotations

import threading

import mlx.core as mx
import pytest

from mlxchat.engine.thread.worker import EngineClosed, EngineThread
from mlxchat.errors import MlxchatError


def test_work_after_close_is_refused_not_left_waiting():
    thread = EngineThread("test-engine")
    assert thread.call(lambda: (mx.ones((2,)) * 3).sum().item()) == 6.0
    thread.close()
    assert not thread.alive()
    with pytest.raises(EngineClosed) as caught:
        thread.later(lambda: 1).result(timeout=5)  # (it used to wait for ever)
    assert isinstance(caught.value, MlxchatError) and str(caught.value) == "the engine was closed"
    with pytest.raises(EngineClosed):
        thread.call(lambda: 1)
    thread.close()  # twice is harmless


def test_a_caller_racing_the_close_gets_an_answer_either_way():
    thread = EngineThread("test-engine")
    started, answers = threading.Event(), []

    def ask_many() -> None:
        started.set()
        for _ in range(200):
            try:
                answers.append(thread.later(lambda: "ran").result(timeout=10))
            except EngineClosed:
                answers.append("refused")
                return

    asker = threading.Thread(target=ask_many)
    asker.start()
    started.wait(5)
    thread.close()
    asker.join(timeout=20)
    assert not asker.is_alive()  # never stuck on a future nobody completes
    assert answers and set(answers) <= {"ran", "refused"}
