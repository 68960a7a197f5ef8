"""TUI benchmark: decode speed inside the running app vs the engine alone.

    .venv/bin/python bench/tui.py [--quick] [--model small-llama|SPEC]

The app runs headless (Textual's run_test) and each turn goes the real way:
text in the prompt, Enter, the turn worker, 50 ms batches into the streaming
Markdown transcript and the gauges. The baseline is ChatEngine.turn on the
same loaded model with nothing else running. The two alternate. Reported:
the engine's own decode tok/s in both settings, and in the app also the rate
at which text reached the screen.

The last line is: ratios: tui_overhead=X (app decode tok/s / engine alone).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import median, pick_model
from mlxchat.chat import GenerationSettings, Message
from mlxchat.config import Settings
from mlxchat.engine import ChatEngine, TurnDone
from mlxchat.models.info import LoadedModel

PROMPT = "Tell me a long story about a lighthouse keeper and the ships she guided."


def engine_alone(loaded: LoadedModel, settings: GenerationSettings) -> float:
    engine = ChatEngine(loaded)
    try:
        events = list(engine.turn([Message("user", PROMPT)], settings))
        done = next(e for e in events if isinstance(e, TurnDone))
    finally:
        engine.close()
    return done.stats.decode_tps


class AppRunner:
    """One headless app, kept open; ``turn()`` sends PROMPT in a fresh session."""

    def __init__(self, loaded: LoadedModel, generation: GenerationSettings, db: Path) -> None:
        from mlxchat.store import open_store
        from mlxchat.tui.app import create_app
        from mlxchat.app_root import open_conversation

        factory = partial(open_conversation, store_factory=lambda: open_store(db),
                          load_model=lambda spec, progress=None: loaded)
        self.app = create_app(Settings(generation=generation, memory_budget_bytes=10**10),
                              model_spec=loaded.info.name, conversation_factory=factory,
                              cursor_blink=False)
        self.batches: list[tuple[float, int]] = []  # (time shown, tokens so far)
        self.finished = asyncio.Event()
        show, finish = self.app._show_batch, self.app._turn_finished

        async def showing(reply, batch):
            cpu = await show(reply, batch)
            self.batches.append((time.perf_counter(), batch.generated_tokens))
            return cpu

        async def finishing(reply, done, error):
            await finish(reply, done, error)
            self.finished.set()
        self.app._show_batch, self.app._turn_finished = showing, finishing

    async def ready(self, pilot) -> None:
        await self.app.workers.wait_for_complete()
        await pilot.pause()
        assert self.app.conversation is not None, self.app.start_error

    async def turn(self, pilot) -> tuple[float, float, int]:
        """(engine decode tok/s, tok/s as shown on screen, batches) of one turn."""
        app = self.app
        await pilot.press(*"/new", "enter")
        await app.workers.wait_for_complete()
        self.batches.clear()
        self.finished.clear()
        app.prompt.text = PROMPT
        # simulate_key: Pilot's press would poll for an idle CPU while we decode.
        app.simulate_key("enter")
        await self.finished.wait()
        await app.workers.wait_for_complete()
        await pilot.pause()  # let the app go idle before anything else is timed
        stats = app.conversation.last_stats
        (t0, n0), (t1, n1) = self.batches[0], self.batches[-1]
        shown = (n1 - n0) / max(t1 - t0, 1e-9)
        return stats.decode_tps, shown, len(self.batches)


async def measure(loaded: LoadedModel, generation: GenerationSettings, repeats: int,
                  db: Path) -> tuple[list[float], list[float], list[float], list[int]]:
    runner = AppRunner(loaded, generation, db)
    in_app, shown, alone, batches = [], [], [], []
    async with runner.app.run_test(size=(120, 40)) as pilot:
        await runner.ready(pilot)
        await runner.turn(pilot)  # warm-up: first-use costs of both paths
        engine_alone(loaded, generation)
        for i in range(2 * repeats):
            if i % 2 == (i // 2) % 2:  # alternate which goes first
                alone.append(await asyncio.to_thread(engine_alone, loaded, generation))
            else:
                tps, screen, n = await runner.turn(pilot)
                in_app.append(tps)
                shown.append(screen)
                batches.append(n)
        await pilot.press("ctrl+q")
    return in_app, shown, alone, batches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small random llama (<1 min)")
    ap.add_argument("--model", default=None, help="small-llama (default with --quick) or a spec")
    args = ap.parse_args()
    os.environ.setdefault("MLXCHAT_HOME", tempfile.mkdtemp(prefix="mlxchat-bench-tui-"))
    model_name = args.model or ("small-llama" if args.quick else "smollm2-135m")
    # The random llama decodes ~300 tok/s here: long turns and more of them keep
    # the ratio out of the noise; the bundled model is ~40x slower per token.
    repeats = 4 if args.quick else 3
    tokens = 400 if args.quick else 96
    loaded = pick_model(model_name)
    print(f"model: {loaded.info.name} ({loaded.info.quantization}, {loaded.info.device}); "
          f"{tokens} tokens a turn, {repeats} turns each way, alternating")
    generation = GenerationSettings(temperature=0.0, max_tokens=tokens)
    db = Path(tempfile.mkdtemp(prefix="mlxchat-bench-tui-")) / "sessions.db"
    in_app, shown, alone, batches = asyncio.run(measure(loaded, generation, repeats, db))
    overhead = median(in_app) / median(alone)
    print(f"decode tok/s: in the app {median(in_app):.1f} (runs {', '.join(f'{x:.1f}' for x in in_app)})"
          f"  engine alone {median(alone):.1f} (runs {', '.join(f'{x:.1f}' for x in alone)})")
    print(f"text reached the screen at {median(shown):.1f} tok/s in {median(batches):.0f} "
          f"batches a turn")
    print(f"ratios: tui_overhead={overhead:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
