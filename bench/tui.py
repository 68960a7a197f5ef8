"""TUI benchmark: decode speed inside the running app vs the engine alone.

    .venv/bin/python bench/tui.py [--quick] [--model small-llama|SPEC]

The app runs headless (Textual's run_test) and each turn goes the real way:
text in the prompt, Enter, the turn worker, paced batches into the streaming
Markdown transcript and the gauges. The baseline is ChatEngine.turn on the
same loaded model with nothing else running. The two alternate in pairs
(ABBA, so neither always goes first) and each pair gives a ratio, so a
machine that slows down for a while moves both sides of a pair alike.
Reported: the engine's own decode tok/s in both settings (median, spread),
the rate at which text reached the screen, the UI thread's share of the
decode time, and the median of the pairs' ratios next to the ratio of the
medians.

The last line is: ratios: tui_overhead=X (median over pairs of app decode
tok/s / engine alone).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import median, pick_model

from mlxchat.chat import Message
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TurnDone
from mlxchat.generation import GenerationSettings
from mlxchat.models import LoadedModel

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
        from mlxchat.session.root import open_conversation
        from mlxchat.store import open_store
        from mlxchat.tui.app import create_app

        factory = partial(open_conversation, store_factory=lambda: open_store(db),
                          load_model=lambda spec, progress=None: loaded)
        self.app = create_app(Settings(generation=generation, memory_budget_bytes=10**10),
                              model_spec=loaded.info.name, conversation_factory=factory,
                              cursor_blink=False)
        self.batches: list[tuple[float, int]] = []  # (time shown, tokens so far)
        self.ui_cpu: list[tuple[float, float]] = []  # (time, UI CPU) at first batch, at end
        self.finished = asyncio.Event()
        stream = self.app.turn_stream
        show, finish = stream.show_batch, stream.show_end

        async def showing(reply, batch):
            if not self.ui_cpu:
                self.ui_cpu.append((time.perf_counter(), time.thread_time()))
            cpu = await show(reply, batch)
            self.batches.append((time.perf_counter(), batch.generated_tokens))
            return cpu

        async def finishing(reply, done, error):
            self.ui_cpu.append((time.perf_counter(), time.thread_time()))
            await finish(reply, done, error)
            self.finished.set()
        stream.show_batch, stream.show_end = showing, finishing

    async def ready(self, pilot) -> None:
        await self.app.workers.wait_for_complete()
        await pilot.pause()
        assert self.app.conversation is not None, self.app.start_error

    async def turn(self, pilot) -> tuple[float, float, int, float]:
        """(engine decode tok/s, tok/s as shown on screen, batches, the UI thread's
        CPU share from the first batch to the end) of one turn."""
        app = self.app
        await pilot.press(*"/new", "enter")
        await app.workers.wait_for_complete()
        self.batches.clear()
        self.ui_cpu.clear()
        self.finished.clear()
        app.prompt.text = PROMPT
        # simulate_key: Pilot's press would poll for an idle CPU while we decode.
        app.simulate_key("enter")
        await self.finished.wait()
        await app.workers.wait_for_complete()
        await pilot.pause()  # let the app go idle before anything else is timed
        stats = app.conversation.turns.last_stats
        (t0, n0), (t1, n1) = self.batches[0], self.batches[-1]
        shown = (n1 - n0) / max(t1 - t0, 1e-9)
        (w0, cpu0), (w1, cpu1) = self.ui_cpu
        return stats.decode_tps, shown, len(self.batches), (cpu1 - cpu0) / max(w1 - w0, 1e-9)


@dataclass
class Measured:
    in_app: list[float] = field(default_factory=list)
    alone: list[float] = field(default_factory=list)
    shown: list[float] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    ui_share: list[float] = field(default_factory=list)

    def pair_ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.in_app, self.alone)]


async def measure(loaded: LoadedModel, generation: GenerationSettings, pairs: int,
                  db: Path) -> Measured:
    runner = AppRunner(loaded, generation, db)
    out = Measured()

    async def in_app() -> None:
        tps, screen, n, share = await runner.turn(pilot)
        out.in_app.append(tps)
        out.shown.append(screen)
        out.batches.append(n)
        out.ui_share.append(share)

    async def alone() -> None:
        out.alone.append(await asyncio.to_thread(engine_alone, loaded, generation))

    async with runner.app.run_test(size=(120, 40)) as pilot:
        await runner.ready(pilot)
        await runner.turn(pilot)  # warm-up: first-use costs of both paths
        engine_alone(loaded, generation)
        for i in range(pairs):  # ABBA: neither side always goes first
            for step in ((alone, in_app) if i % 2 == 0 else (in_app, alone)):
                await step()
        await pilot.press("ctrl+q")
    return out


def spread(xs: list[float]) -> str:
    return f"{median(xs):.1f} (min {min(xs):.1f}, max {max(xs):.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small random llama (<1 min)")
    ap.add_argument("--model", default=None, help="small-llama (default with --quick) or a spec")
    ap.add_argument("--pairs", type=int, default=None,
                    help="turns each way (default 8 with --quick, 3 otherwise)")
    args = ap.parse_args()
    os.environ.setdefault("MLXCHAT_HOME", tempfile.mkdtemp(prefix="mlxchat-bench-tui-"))
    model_name = args.model or ("small-llama" if args.quick else "smollm2-135m")
    # The random llama decodes ~250 tok/s here: long turns and more of them keep
    # the ratio out of the noise; the bundled model is ~40x slower per token.
    pairs = args.pairs or (8 if args.quick else 3)
    tokens = 400 if args.quick else 96
    loaded = pick_model(model_name)
    print(f"model: {loaded.info.name} ({loaded.info.quantization}, {loaded.info.device}); "
          f"{tokens} tokens a turn, {pairs} pairs of turns (app, engine alone), ABBA order")
    # Speculation off on both sides: auto measures once per engine, and the
    # app's one engine could decide otherwise than the fresh ones alone.
    generation = GenerationSettings(temperature=0.0, max_tokens=tokens, speculative="off")
    db = Path(tempfile.mkdtemp(prefix="mlxchat-bench-tui-")) / "sessions.db"
    m = asyncio.run(measure(loaded, generation, pairs, db))
    ratios = m.pair_ratios()
    print(f"decode tok/s in the app:     {spread(m.in_app)}  runs "
          f"{', '.join(f'{x:.1f}' for x in m.in_app)}")
    print(f"decode tok/s, engine alone:  {spread(m.alone)}  runs "
          f"{', '.join(f'{x:.1f}' for x in m.alone)}")
    print(f"pair ratios: {', '.join(f'{x:.3f}' for x in ratios)}; "
          f"ratio of the medians {median(m.in_app) / median(m.alone):.3f}")
    print(f"text reached the screen at {median(m.shown):.1f} tok/s in {median(m.batches):.0f} "
          f"batches a turn; the UI thread used {median(m.ui_share):.1%} of the decode time")
    print(f"ratios: tui_overhead={median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
