"""Between Enter and the first figure of a turn, Now says what the turn waits for,
with a spinner, instead of 'idle' (the first turn of a launch sets up the
model's layers for this CPU: seconds with the bundled model)."""

from __future__ import annotations

import threading
from functools import partial

import pytest
from textual.widgets import Static

from mlxchat.engine.core import ChatEngine
from mlxchat.engine.turn.cpu_choice import CpuMatmul
from mlxchat.models.loader import load_folder
from mlxchat.models.testing.text import write_tiny_model

from .app_support import ready, settle, tiny_app, until


@pytest.fixture(scope="module")
def tiny_q4(tmp_path_factory):
    """Quantized, so its first turn has layers to set up for the CPU."""
    return load_folder(write_tiny_model(tmp_path_factory.mktemp("tiny-q4"), quantize_bits=4),
                       name="tiny-q4", spec="tiny-q4")


class HeldMatmul(CpuMatmul):
    """The real choice, held until ``go`` is set: the wait lasts until the test
    has seen what it wanted to."""

    def __init__(self, go: threading.Event) -> None:
        super().__init__()
        self.go = go
        self.said: list[str] = []

    def pending(self, loaded, wanted):
        what = super().pending(loaded, wanted)
        if what is not None:
            self.said.append(what)
        return what

    def match(self, loaded, wanted):
        self.go.wait(60)
        return super().match(loaded, wanted)


def held_engine(loaded, *, matmul: HeldMatmul, **options) -> ChatEngine:
    engine = ChatEngine(loaded, **options)
    engine.cpu_matmul = matmul
    return engine


def now_lines(app) -> tuple[str, str]:
    """The Now panel's text, wide and compact."""
    return tuple(app.gauges.query_one(f"#{name}", Static).render().plain
                 for name in ("live-text", "compact-live"))


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_now_says_what_the_first_turn_waits_for_with_a_spinner(tmp_path, tiny_q4, size):
    go = threading.Event()
    matmul = HeldMatmul(go)
    app = tiny_app(tmp_path / "s.db", tiny_q4, model_spec="tiny-q4",
                   engine_factory=partial(held_engine, matmul=matmul))
    try:
        async with app.run_test(size=size) as pilot:
            await ready(pilot)
            app.prompt.text = "hello"
            app.simulate_key("enter")
            await until(lambda: matmul.said)
            [what] = matmul.said
            await until(lambda: all(what in line for line in now_lines(app)))
            first = now_lines(app)
            assert app.generating and "idle" not in first[0]
            await until(lambda: now_lines(app) != first)  # the mark turns
            assert all(what in line for line in now_lines(app))
            go.set()
            await settle(pilot)
            assert not app.generating
            assert now_lines(app)[0] == "idle"
            assert not any(what in line for line in now_lines(app))
    finally:
        go.set()
