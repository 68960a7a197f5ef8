"""The app's MLX work never lands on Textual's pooled worker threads.

Textual's thread workers run on asyncio's default executor, whose threads are
reused. MLX streams belong to a thread: once a thread's streams are released
(``mx.clear_streams``), MLX on it fails with 'There is no Stream(cpu, 0) in
current thread'. The app runs its model loads (start-up, ``/model``) on one
thread of its own, released once at exit. Here the loads really load (from
disk) and the default executor is replaced by one the app's old code would
break: two threads, reused when idle, or threads whose streams are released
before their first job.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest

from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model
from mlxchat.session.mlx_thread import MlxThreadStopped
from mlxchat.session.root import open_conversation
from mlxchat.session.streams import release_thread_streams
from mlxchat.store import open_store
from mlxchat.tui.app import create_app
from mlxchat.tui.widgets import AssistantMessage, NoticeMessage

from .app_support import NOW, ready, send, settle, tiny_settings


@pytest.fixture(scope="module")
def model_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mlx-thread-models")
    return {"tiny-a": write_tiny_model(root / "a", seed=0),
            "tiny-b": write_tiny_model(root / "b", seed=1)}


def disk_app(db: Path, folders: dict[str, Path]):
    """The app on models loaded from disk at every load (MLX on the loading thread)."""
    def load(spec: str, progress=None):
        return load_folder(folders[spec], name=spec, spec=spec)
    factory = partial(open_conversation, store_factory=lambda: open_store(db), load_model=load)
    return create_app(tiny_settings(), model_spec="tiny-a", conversation_factory=factory,
                      now=lambda: NOW, cursor_blink=False)


def errors(app) -> list[str]:
    return [str(w.render()) for w in app.transcript.query(NoticeMessage) if w.level == "error"]


async def switch_twice_then_answer(app, pilot) -> None:
    await ready(pilot)
    await send(pilot, "/model tiny-b")
    assert app.conversation.model_spec == "tiny-b", errors(app)
    await send(pilot, "/model tiny-a")
    assert app.conversation.model_spec == "tiny-a", errors(app)
    await send(pilot, "Hello after two switches")
    replies = list(app.transcript.query(AssistantMessage))
    assert len(replies) == 1 and replies[0].text and not replies[0].cancelled
    assert app.conversation.messages[-1].content == replies[0].text
    assert errors(app) == []


async def test_two_model_switches_on_reused_worker_threads_then_a_turn(
        tmp_path, model_folders):
    # Two threads, reused whenever idle (one would deadlock: a turn's worker
    # waits for the UI, whose Markdown parses on the default executor).
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="reused")
    asyncio.get_running_loop().set_default_executor(pool)
    app = disk_app(tmp_path / "s.db", model_folders)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await switch_twice_then_answer(app, pilot)
    finally:
        pool.shutdown(wait=True)


async def test_no_mlx_work_on_worker_threads_whose_streams_are_gone(tmp_path, model_folders):
    # Every pooled thread starts with its MLX streams released: any MLX call
    # on one fails, so start-up, both loads, the turn, the typing prefill, the
    # idle compaction and the quit must all run their MLX elsewhere.
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="released",
                              initializer=release_thread_streams)
    asyncio.get_running_loop().set_default_executor(pool)
    app = disk_app(tmp_path / "s.db", model_folders)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await switch_twice_then_answer(app, pilot)
            conv = app.conversation
            app.prompt.text = "Typed ahead while idle"
            app.typing.changed(app.prompt.text, at_once=True)
            await settle(pilot)
            assert app.typing.tokens > 0
            app.compaction.join(conv)
            await settle(pilot)
            assert errors(app) == []
        # Quit stopped the app's thread (its streams released on it).
        assert not app.mlx.alive()
        with pytest.raises(MlxThreadStopped):
            app.mlx.submit(lambda: None)
    finally:
        pool.shutdown(wait=True)
