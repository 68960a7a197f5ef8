"""The real app on a tiny random model: a conversation factory for tests.

``tiny_factory(tmp_path, loaded)`` is ``app_root.open_conversation`` with a store
on ``tmp_path`` and the tiny model as every model, so the app's start-up logic
(--continue, --session, snapshot restore) is the one under test.
"""

from __future__ import annotations

import asyncio
import dataclasses
from functools import partial
from pathlib import Path
from typing import ClassVar

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.engine.speculative.auto import VerifyCost
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel, ModelError
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store
from mlxchat.tui.app import MlxChatApp, create_app

GB = 1_000_000_000
NOW = 1_750_000_000.0


def tiny_settings(max_tokens: int = 8, **extra) -> Settings:
    return Settings(model="tiny", memory_budget_bytes=16 * GB,
                    generation=GenerationSettings(temperature=0.0, max_tokens=max_tokens),
                    **extra)


def tiny_loader(*models: LoadedModel):
    by_spec = {m.info.spec: m for m in models}

    def load(spec: str, progress=None) -> LoadedModel:
        if spec not in by_spec:
            raise ModelError(f"unknown model '{spec}' (tests know {', '.join(by_spec)})")
        if progress:
            progress("load", 0, 1)
            progress("load", 1, 1)
        return by_spec[spec]
    return load


def tiny_factory(db: Path, *models: LoadedModel, engine_factory=ChatEngine):
    return partial(open_conversation, store_factory=lambda: open_store(db),
                   load_model=tiny_loader(*models), engine_factory=engine_factory)


def tiny_app(db: Path, *models: LoadedModel, settings: Settings | None = None,
             engine_factory=ChatEngine, **kwargs) -> MlxChatApp:
    return create_app(settings or tiny_settings(), model_spec=kwargs.pop("model_spec", None),
                      conversation_factory=tiny_factory(db, *models,
                                                        engine_factory=engine_factory),
                      now=kwargs.pop("now", lambda: NOW), cursor_blink=False, **kwargs)


async def ready(pilot) -> MlxChatApp:
    """Wait until the model is loaded and the session shown."""
    app = pilot.app
    await app.workers.wait_for_complete()
    await pilot.pause()
    assert app.conversation is not None, app.start_error
    return app


async def settle(pilot) -> None:
    """Wait for every worker (turns, commands), then for the UI to catch up."""
    app = pilot.app
    for _ in range(3):
        await app.workers.wait_for_complete()
        await pilot.pause()


def first_text(app: MlxChatApp) -> asyncio.Event:
    """Set once the first batch of streamed text is on screen."""
    arrived = asyncio.Event()
    show = app.turn_stream.show_batch

    async def showing(reply, batch):
        cpu = await show(reply, batch)
        arrived.set()
        return cpu
    app.turn_stream.show_batch = showing
    return arrived


async def send(pilot, text: str) -> None:
    """Type ``text`` into the prompt, press Enter and wait for the reply to finish."""
    pilot.app.prompt.text = text
    await pilot.press("enter")
    await settle(pilot)


async def start_long_reply(app: MlxChatApp, text: str = "Tell me everything") -> None:
    """Send ``text`` with Enter and wait until the reply's first text shows."""
    arrived = first_text(app)
    app.prompt.text = text
    app.simulate_key("enter")
    await asyncio.wait_for(arrived.wait(), 30)


async def until(condition, timeout: float = 30.0) -> None:
    """Wait for ``condition()`` while a turn runs, checking every frame. Pilot's
    press/pause wait for an idle CPU, which never comes while the model decodes;
    keys then go in with ``app.simulate_key``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {condition}")
        await asyncio.sleep(1 / 60)


def steady_verify_cost(model, layers, *, proposed: int, step_s: float) -> VerifyCost:
    """speculative=auto's measurement is a clock reading too: fixed at what this
    CPU measures (a verifying pass costs about k+1 steps: plain)."""
    return VerifyCost(proposed=proposed, ratio=proposed + 1.0, context=0)


class SteadyEngine(ChatEngine):
    """A real engine whose clock-dependent figures are fixed, for snapshots."""

    FIXED: ClassVar[dict[str, float]] = {"ttft_s": 0.042, "prefill_tps": 1234.5,
                                         "decode_tps": 87.6, "total_s": 0.5}
    PEAK = 123_456_789

    def __init__(self, loaded: LoadedModel, **options):
        super().__init__(loaded, measure_verify=steady_verify_cost, **options)

    def turn(self, messages, settings, **kw):
        for event in super().turn(messages, settings, **kw):
            if isinstance(event, TextDelta):
                event.decode_tps = self.FIXED["decode_tps"]
            elif isinstance(event, TurnDone):
                for name, value in self.FIXED.items():
                    setattr(event.stats, name, value)
                event.stats.peak_memory_bytes = self.PEAK
            yield event

    def state(self):
        return dataclasses.replace(super().state(), peak_memory_bytes=self.PEAK)
