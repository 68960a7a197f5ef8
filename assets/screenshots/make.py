"""Screenshots for the README, from a real exchange with the bundled model.

    HF_HUB_OFFLINE=1 .venv/bin/python assets/screenshots/make.py

Writes main.svg (a follow-up answered from a restored KV snapshot), sessions.svg,
help.svg and compaction.svg (a conversation compacted by /compact, its summary
unfolded) next to this file; ``make.py compaction`` writes only the last. Uses a
throwaway MLXCHAT_HOME (the bundled GGUF is imported there first, a few seconds).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
SIZE = (130, 40)


async def main() -> int:
    os.environ["MLXCHAT_HOME"] = tempfile.mkdtemp(prefix="mlxchat-shots-")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mlxchat.chat import GenerationSettings
    from mlxchat.config import Settings
    from mlxchat.tui.app import create_app

    settings = Settings(generation=GenerationSettings(temperature=0.0, max_tokens=96),
                        system_prompt="You are a concise assistant.")
    app = create_app(settings, model_spec="smollm2-135m", cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:

        async def settle() -> None:
            for _ in range(3):
                await app.workers.wait_for_complete()
                await pilot.pause()

        async def send(text: str) -> None:
            app.prompt.text = text
            await pilot.press("enter")
            await settle()

        await settle()
        if app.conversation is None:
            print(f"could not start: {app.start_error}", file=sys.stderr)
            return 1
        await send("What is the capital of France? One sentence.")
        first = app.conversation.session.id
        await send("/new")
        await send("Write a haiku about the sea.")
        await send(f"/open #{first}")  # restores that session's KV snapshot
        await send("And of Italy?")
        app.save_screenshot("main.svg", str(HERE))

        await pilot.press("ctrl+o")
        await settle()
        app.screen.query_one("#sessions-search").cursor_blink = False
        await pilot.pause()
        app.save_screenshot("sessions.svg", str(HERE))
        await pilot.press("escape")
        await pilot.pause()

        await pilot.press("f1")
        await pilot.pause()
        app.save_screenshot("help.svg", str(HERE))
        await pilot.press("escape")
        await pilot.press("ctrl+q")
    for name in ("main.svg", "sessions.svg", "help.svg"):
        print(HERE / name)
    return 0


FACTS = ("My sister Ada lives in Lyon and works as a baker.",
         "Our trip starts on the 14th of May; we take the night train.",
         "The budget for the whole week is 900 euros.",
         "Pack the blue tent, not the green one: its pole is broken.")


async def compaction() -> int:
    """A conversation compacted by hand, the summary unfolded under its messages."""
    os.environ["MLXCHAT_HOME"] = tempfile.mkdtemp(prefix="mlxchat-shots-")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mlxchat.chat import GenerationSettings
    from mlxchat.config import Settings
    from mlxchat.tui.app import create_app

    settings = Settings(generation=GenerationSettings(temperature=0.0, max_tokens=48),
                        system_prompt="You are a concise assistant.")
    app = create_app(settings, model_spec="smollm2-135m", cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        async def send(text: str) -> None:
            app.prompt.text = text
            await pilot.press("enter")
            for _ in range(3):
                await app.workers.wait_for_complete()
                await pilot.pause()

        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause()
        if app.conversation is None:
            print(f"could not start: {app.start_error}", file=sys.stderr)
            return 1
        await send("/set context_window 512")
        for fact in FACTS:
            await send(fact + " Please remember it.")
        await send("/compact")
        await send("Where does Ada live?")
        await pilot.press("ctrl+t")  # the last folded thing: the summary
        await pilot.pause()
        app.transcript.scroll_end(animate=False)
        await pilot.pause()
        app.save_screenshot("compaction.svg", str(HERE))
        await pilot.press("ctrl+q")
    print(HERE / "compaction.svg")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["compaction"]:
        raise SystemExit(asyncio.run(compaction()))
    raise SystemExit(asyncio.run(main()) or asyncio.run(compaction()))
