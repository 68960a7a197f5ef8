"""How close the prefill forecast (/attach, /pin, /docs) comes to the prefill
it forecasts: a chat of a few short messages on a model, then a long
attachment, forecast before it is sent and measured when it is.

    .venv/bin/python bench/prefill_forecast.py [--model smollm2-135m] [--tokens 3000]

The short messages give few-token prefill chunks, most of whose time is a
forward pass's own cost; the forecast takes that cost from the measured
decode step (``prefill_cost.fit(step=...)``) instead of spreading it over
the chunks' tokens, as it did before (printed beside it, from the same
chunks). The last line is:
forecast_ratio=X forecast_ratio_before=X (forecast seconds over measured) actual_s=X load=X
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))

from common import greedy_conversation, pick_model  # noqa: E402

from mlxchat.engine.events import TurnDone  # noqa: E402
from mlxchat.engine.turn.prefill_cost import fit  # noqa: E402
from mlxchat.session.conversation import Conversation  # noqa: E402

QUESTIONS = ["Hello there, who are you?", "What is the capital of France?",
             "And of Spain?", "Tell me a short story about a cat."]
PARAGRAPH = ("The river valley has been farmed for centuries; its villages trade grain, wool "
             "and timber along roads that follow the water, and their markets meet weekly. ")


def send(conv: Conversation, text: str) -> TurnDone:
    done = None
    for event in conv.turns.send(text):
        if isinstance(event, TurnDone):
            done = event
    assert done is not None
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=3000, help="the attachment's size")
    args = parser.parse_args()
    loaded = pick_model(args.model)
    conv, folder = greedy_conversation(loaded, max_tokens=16, prefix="mlxchat-bench-forecast-")
    for question in QUESTIONS:
        stats = send(conv, question).stats
        print(f"turn: prefilled {stats.prefilled_tokens} tokens, decode "
              f"{stats.decode_tps or 0:.1f} tok/s")
    text = PARAGRAPH
    while len(loaded.tokenizer.encode(text)) < args.tokens:
        text += PARAGRAPH
    message = text + "\nSummarise the text above in one sentence."
    n = len(loaded.tokenizer.encode(message))
    estimate = conv.views.prefill_estimate(n)
    before = fit(conv.engine.prefill_chunks(conv.generation.kv_bits)).seconds(n, estimate.start)
    started = time.perf_counter()
    stats = send(conv, message).stats
    actual = stats.prefilled_tokens / stats.prefill_tps
    load = os.getloadavg()[0]
    cost = estimate.cost
    print(f"{args.model}: {n} tokens after {estimate.start}: forecast {estimate.seconds:.1f} s "
          f"(per pass {cost.per_pass * 1000:.1f} ms, per token {cost.per_token * 1000:.2f} ms, "
          f"from {cost.chunks} chunks), before {before:.1f} s; measured {actual:.1f} s "
          f"({stats.prefill_tps:.0f} tok/s; turn {time.perf_counter() - started:.1f} s); "
          f"load {load:.1f}")
    print(f"forecast_ratio={estimate.seconds / actual:.2f} forecast_ratio_before="
          f"{before / actual:.2f} actual_s={actual:.1f} load={load:.1f}")
    conv.close()
    conv.store.close()
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
