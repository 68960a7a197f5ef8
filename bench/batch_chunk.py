"""The batched prefill chunk: a newcomer's long prompt prefilled in chunks of
C tokens, one batch decode step of the others between two chunks. Small C
keeps the others' tokens coming (their longest gap is about one chunk's
time plus a step); large C prefills the newcomer faster. For each C: the
newcomer's prefill tok/s and the others' longest gap between two tokens
while it prefilled, and a batch's step time with no newcomer.

    .venv/bin/python bench/batch_chunk.py [--model smollm2-135m] [--prompt-words 1500]
        [--chunks 64,128,256,512,1024] [--others 3]
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
from mlxchat.engine.batch import caches  # noqa: E402
from mlxchat.engine.batch.decoder import BatchDecoder  # noqa: E402
from mlxchat.engine.core import ChatEngine  # noqa: E402
from mlxchat.engine.events import TextDelta, TurnDone  # noqa: E402
from mlxchat.generation import GenerationSettings  # noqa: E402

FILLER = ("The history of the region is long and varied, shaped by rivers, trade routes, "
          "harvests and the people who settled along the coast over many centuries. ")


def one(model, chunk: int, words: int, others: int) -> tuple[float, float, float]:
    """(newcomer prefill tok/s, others' longest token gap during it (s), median step s)."""
    caches.CHUNK_TOKENS = chunk
    batch = BatchDecoder(model.model, size=others + 1)
    engines = [ChatEngine(model) for _ in range(others + 1)]
    for e in engines:
        e.decode_in(batch)
    stamps: list[list[float]] = [[] for _ in range(others)]
    window: list[float] = []
    long_settings = GenerationSettings(temperature=0.0, max_tokens=400)

    def other(i: int) -> None:
        for ev in engines[i].turn([Message("user", f"Tell a long story number {i}.")],
                                  long_settings):
            if isinstance(ev, TextDelta):
                stamps[i].append(time.perf_counter())
    threads = [threading.Thread(target=other, args=(i,)) for i in range(others)]
    for t in threads:
        t.start()
    while min(len(s) for s in stamps) < 8:
        time.sleep(0.01)
    prompt = FILLER * (words // len(FILLER.split()) + 1) + "\nSummarize."
    window.append(time.perf_counter())
    done = None
    for ev in engines[-1].turn([Message("user", prompt)],
                               GenerationSettings(temperature=0.0, max_tokens=4)):
        if isinstance(ev, TextDelta) and len(window) == 1:
            window.append(time.perf_counter())
        if isinstance(ev, TurnDone):
            done = ev
    for e in engines[:-1]:
        e.cancel()
    for t in threads:
        t.join()
    a, b = window[0], window[-1]
    gaps = [y - x for s in stamps for x, y in zip(s, s[1:]) if a <= x <= b]
    steady = sorted(y - x for s in stamps for x, y in zip(s, s[1:]) if x < a)
    for e in engines:
        e.close()
    batch.close()
    assert done is not None
    return done.stats.prefill_tps, max(gaps or [0.0]), steady[len(steady) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompt-words", type=int, default=1500)
    ap.add_argument("--chunks", default="64,128,256,512,1024")
    ap.add_argument("--others", type=int, default=3)
    args = ap.parse_args()
    model = pick_model(args.model)
    print(f"load {os.getloadavg()[0]:.2f}; {args.others} others decoding, a "
          f"{args.prompt_words}-word newcomer")
    for chunk in map(int, args.chunks.split(",")):
        tps, gap, step = one(model, chunk, args.prompt_words, args.others)
        print(f"chunk {chunk:5d}: newcomer prefill {tps:7.1f} tok/s, others' longest gap "
              f"{gap:5.2f} s (a step alone {step * 1000:.0f} ms), load {os.getloadavg()[0]:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
