"""Aggregate decode speed of N replies decoded together in one batch (the
engine alone, no HTTP), against one reply decoded alone (no batch).

    .venv/bin/python bench/batch_decode.py [--model smollm2-135m] [--sizes 1,2,4,8]
        [--tokens 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import pick_model  # noqa: E402

from mlxchat.chat import Message  # noqa: E402
from mlxchat.engine.batch.decoder import BatchDecoder  # noqa: E402
from mlxchat.engine.core import ChatEngine  # noqa: E402
from mlxchat.engine.events import TurnDone  # noqa: E402
from mlxchat.generation import GenerationSettings  # noqa: E402


def run(model, n: int, tokens: int, batched: bool) -> tuple[float, int]:
    """(aggregate tok/s from the first start to the last end, tokens)."""
    batch = BatchDecoder(model.model, size=n) if batched else None
    engines = [ChatEngine(model) for _ in range(n)]
    for e in engines:  # each engine's first turn measures its matmul plan: not timed
        e.decode_in(batch)
        for _ in e.turn([Message("user", "Hi.")], GenerationSettings(max_tokens=2)):
            pass
    settings = GenerationSettings(temperature=0.0, max_tokens=tokens)
    counts = [0] * n

    def go(i: int) -> None:
        for ev in engines[i].turn([Message("user", f"Write a long story, number {i}.")],
                                  settings):
            if isinstance(ev, TurnDone):
                counts[i] = ev.stats.generated_tokens
    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    for e in engines:
        e.close()
    if batch is not None:
        batch.close()
    return sum(counts) / seconds, sum(counts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--sizes", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    model = pick_model(args.model)
    base, _ = run(model, 1, args.tokens, batched=False)
    print(f"alone (no batch): {base:6.1f} tok/s, load {os.getloadavg()[0]:.2f}", flush=True)
    for n in map(int, args.sizes.split(",")):
        tps, total = run(model, n, args.tokens, batched=True)
        print(f"batch of {n}: {tps:6.1f} tok/s aggregate ({total} tokens), x{tps / base:.2f} "
              f"of alone, load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
