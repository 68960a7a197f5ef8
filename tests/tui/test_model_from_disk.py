"""/model loads a model from disk on a command's worker thread. Textual runs
workers on asyncio's pooled threads, reused from one worker to the next, and
every worker lets go of its MLX streams at its end: the next one on that
thread must still be able to run MLX (it failed: 'There is no Stream(cpu, 0)
in current thread')."""

from __future__ import annotations

from functools import partial

from mlxchat.models import load_folder
from mlxchat.models.testing.text import write_tiny_model
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store
from mlxchat.tui.app import create_app

from .app_support import NOW, ready, send, tiny_settings


async def test_model_switches_to_a_model_read_from_disk_after_other_commands(tmp_path, tiny):
    folder = write_tiny_model(tmp_path / "tiny-b", seed=1, context_window=1024)

    def load(spec: str, progress=None):
        # The start-up model is in memory; the other is read, as a real /model does.
        return tiny if spec == "tiny" else load_folder(folder, name="tiny-b", spec="tiny-b")

    factory = partial(open_conversation, store_factory=lambda: open_store(tmp_path / "s.db"),
                      load_model=load)
    app = create_app(tiny_settings(), conversation_factory=factory, now=lambda: NOW,
                     cursor_blink=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(pilot)
        for _ in range(3):  # commands that leave their pooled threads behind
            await send(pilot, "/get temperature")
        await send(pilot, "/model tiny-b")
        assert app.conversation.model_spec == "tiny-b", app.transcript.children[-1]
        await send(pilot, "Hello there")
        assert app.conversation.messages[-1].role == "assistant"
        assert app.conversation.turns.last_stats.generated_tokens > 0
