"""The Responses API's stored conversations across a restart: a first response
(a long input, ``store: true``) from `mlxchat serve`, the server stopped and
started again on the same data folder, then a ``previous_response_id``
follow-up that sends only its new input. Both servers are real processes on
loopback; the follow-up's figures come from its ``usage``.

    PYTHONPATH=app .venv/bin/python bench/responses_followup.py
        [--model smollm2-135m|small-llama|FOLDER] [--words 1500]

Prints the first response's prompt (all of it prefilled), the follow-up's
prompt, reused (``cached_tokens``) and prefilled tokens, the new input's
tokens (the follow-up's prompt less the first exchange) and the ratio that
matters: ``responses_followup_ratio`` = prefilled / new input tokens (goal
<= 1.05; 1.0 is nothing but the new input), beside the time to first token of
each (the first one's prefill of everything is the baseline), with the load.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from serve import FILLER, Server, model_folder  # noqa: E402


def respond(server: Server, **kw):
    start = time.perf_counter()
    made = server.client.responses.create(**kw)
    return time.perf_counter() - start, made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--words", type=int, default=1500,
                        help="words of the first input (default 1500)")
    parser.add_argument("--max-output", type=int, default=16)
    args = parser.parse_args()
    folder = model_folder(args.model)
    data = Path(tempfile.mkdtemp(prefix="mlxchat-followup-"))
    env = {**os.environ, "MLXCHAT_HOME": str(data), "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "mlxchat", "serve", "--model", str(folder)]
    words = FILLER.split()
    text = " ".join(words[i % len(words)] for i in range(args.words))
    common = {"model": str(folder), "max_output_tokens": args.max_output, "temperature": 0}
    server = Server(argv, env)
    try:
        first_s, made = respond(server, input=f"Read this, then say what it is about.\n\n{text}",
                                instructions="Answer in one line.", **common)
    finally:
        server.stop()
    server = Server(argv, env)  # the same data folder: what was stored, and its KV
    try:
        follow_s, follow = respond(server, input="And in three words?", **common,
                                   previous_response_id=made.id,
                                   instructions="Answer in one line.")
    finally:
        server.stop()
    before = made.usage
    after = follow.usage
    reused = after.input_tokens_details.cached_tokens
    prefilled = after.input_tokens - reused
    new = after.input_tokens - (before.input_tokens + before.output_tokens)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"first response: prompt {before.input_tokens:,} (all prefilled), "
          f"{first_s:.2f} s whole")
    print(f"follow-up after a restart: prompt {after.input_tokens:,}, reused {reused:,}, "
          f"prefilled {prefilled:,}, new input {new:,}, {follow_s:.2f} s whole "
          f"({follow_s / first_s:.3f} of the first)")
    print(f"responses_followup_ratio: {prefilled / max(new, 1):.3f} (goal <= 1.05) "
          f"load average: {load}")


if __name__ == "__main__":
    main()
