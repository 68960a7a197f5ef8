"""One run of the app, headless, as the real one starts (the model loaded in the
start-up worker thread), quit with a long reply in flight. Run as a script by
tests/e2e/test_quit_stress.py; the process's exit status is the verdict."""

from __future__ import annotations

import asyncio
import sys
from functools import partial
from pathlib import Path

from mlxchat.config import Settings
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store
from mlxchat.tui.app import create_app


def main(model_dir: str, db: str, mode: str) -> int:
    def load(spec: str, progress=None):  # in the start-up worker thread, like load_model
        return load_folder(Path(model_dir), name="tiny", spec=spec)

    settings = Settings(model="tiny", memory_budget_bytes=1 << 30,
                        generation=GenerationSettings(temperature=0.0, max_tokens=4000))
    factory = partial(open_conversation, store_factory=lambda: open_store(Path(db)),
                      load_model=load)
    app = create_app(settings, conversation_factory=factory, cursor_blink=False)

    async def run() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await app.workers.wait_for_complete()
            assert app.conversation is not None, app.start_error
            if mode == "model":  # a /model switch loads in a command worker thread
                app.submit("/model tiny-again")
                await app.workers.wait_for_complete()
            app.prompt.text = "Tell me a very long story"
            app.simulate_key("enter")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while not app.transcript.query("AssistantMessage") or not app.generating:
                assert loop.time() < deadline, "the reply never started"
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # tokens flowing
            await pilot.press("ctrl+q")
    asyncio.run(run())
    return 0 if app.return_code in (0, None) else 3


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
