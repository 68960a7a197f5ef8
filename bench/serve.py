"""Server benchmark: the same stateless 5-turn conversation (a ~2k-token first
message, then short ones) against `mlxchat serve` and `mlx_lm.server` on the
same model folder, both started as real processes on loopback; then many
conversations taking turns, and the decode rate of long replies.

    .venv/bin/python bench/serve.py [--quick] [--model smollm2-135m|small-llama|FOLDER]
        [--many N] [--many-words W] [--rounds R] [--skip-five] [--skip-many]

The last line is: ratios: api_turn5_ttft_ratio=X (our turn-5 TTFT / mlx_lm.server's)
api_restart_ttft_ratio=X (our turn 5 sent again right after a restart / our turn 5;
mlx_lm.server's printed beside it) api_overhead=X (decode tok/s of 256-token
replies through the API / the engine alone in this process, same prompt, median
of 5) api_many_ttft_ratio=X (N conversations, a W-word first message each,
taking turns for R rounds: our median TTFT of rounds 2.. / mlx_lm.server's at
its defaults, which keep 10 prompt caches) api_many_peak_rss_ratio=X (our peak
RSS / its). mlx_lm.server with --prompt-cache-size N is printed beside.
api_fair_p95_ttft_ratio=X: p95 TTFT of short turns while one client keeps
three long replies queued in its conversation / the same turns alone.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import median  # noqa: E402
from openai import OpenAI  # noqa: E402

FILLER = ("The history of the region is long and varied, shaped by rivers, trade routes, "
          "harvests and the people who settled along the coast over many centuries. ")
MAX_TOKENS = 48
LONG_TOKENS = 256
"""The replies api_overhead is measured on."""
MANY_TOKENS = 8
"""Each reply of the many-conversations rotation (its TTFT is what counts)."""


def model_folder(name: str) -> Path:
    if name == "small-llama":
        from mlxchat.models.testing.text import write_tiny_model

        return write_tiny_model(Path(tempfile.mkdtemp(prefix="mlxchat-bench-")),
                                hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2,
                                intermediate_size=688, context_window=8192)
    if Path(name).is_dir():
        return Path(name)
    from mlxchat.models import resolve_folder

    return resolve_folder(name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on a free loopback port, stopped at the end."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.port = free_port()
        self.proc = subprocess.Popen([*argv, "--port", str(self.port)], env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.client = OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="x",
                             max_retries=0, timeout=600)
        deadline = time.monotonic() + 300
        while True:
            try:  # listening (mlx_lm.server's /v1/models needs a Hugging Face cache)
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"server did not start: {argv}")
                time.sleep(0.2)

    def peak_rss(self) -> int:
        """The process's peak resident memory so far (VmHWM), bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def timed_turn(server: Server, model: str, messages: list[dict],
               max_tokens: int = MAX_TOKENS) -> tuple[float, float, str]:
    """(TTFT s, decode tok/s, reply) of one streamed request: decode is (tokens - 1)
    over first text to end, tokens from the usage when the server gives it."""
    start = time.perf_counter()
    stamps, text, tokens = [], [], 0
    for chunk in server.client.chat.completions.create(
            model=model, messages=messages, temperature=0, max_tokens=max_tokens, stream=True,
            stream_options={"include_usage": True}):
        if chunk.choices and chunk.choices[0].delta.content:
            stamps.append(time.perf_counter())
            text.append(chunk.choices[0].delta.content)
        if getattr(chunk, "usage", None):
            tokens = chunk.usage.completion_tokens
    end = time.perf_counter()
    tokens = tokens or len(stamps)
    ttft = stamps[0] - start if stamps else float("nan")
    tps = (tokens - 1) / max(end - stamps[0], 1e-9) if len(stamps) > 1 else 0.0
    return ttft, tps, "".join(text)


def conversation(server: Server, model: str, history_words: int) -> tuple[list[dict], float,
                                                                          float]:
    """Five turns; returns turn 5's request, its TTFT and the decode tok/s of the turns."""
    first = (FILLER * (history_words // len(FILLER.split()) + 1))
    asks = [f"{first}\nSummarize this.", "Name one river.", "And a harvest?",
            "Who settled there?", "What came next?"]
    messages: list[dict] = []
    ttft, rates = 0.0, []
    for ask in asks:
        messages.append({"role": "user", "content": ask})
        ttft, tps, reply = timed_turn(server, model, messages)
        rates.append(tps)
        messages.append({"role": "assistant", "content": reply})
    return messages[:-1], ttft, median(rates)


def many(argv: list[str], env: dict[str, str], model: str, *, conversations: int,
         words: int, rounds: int) -> dict[str, float]:
    """``conversations`` conversations (each its own ``words``-word first
    message) taking turns for ``rounds`` rounds: the median TTFT of rounds 2..,
    and the server's peak RSS."""
    talks: list[list[dict]] = [[] for _ in range(conversations)]
    filler = FILLER * (words // len(FILLER.split()) + 1)
    ttfts: list[float] = []
    server = Server(argv, env)
    try:
        for turn in range(rounds):
            for n, messages in enumerate(talks):
                ask = (f"Conversation {n}. {filler}\nSummarize this." if not turn
                       else f"Round {turn}: and then?")
                messages.append({"role": "user", "content": ask})
                ttft, _, reply = timed_turn(server, model, messages, MANY_TOKENS)
                messages.append({"role": "assistant", "content": reply})
                if turn:
                    ttfts.append(ttft)
        return {"ttft": median(ttfts), "rss": server.peak_rss()}
    finally:
        server.stop()


def p95(xs: list[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def fair(argv: list[str], env: dict[str, str], model: str, *, hog: bool,
         conversations: int = 5, rounds: int = 4) -> float:
    """p95 TTFT of short turns (``conversations`` taking turns for ``rounds``),
    with ``hog``: while one client keeps 3 requests for 256-token replies in
    flight in one conversation of its own (X-Session: hog)."""
    import threading

    server = Server(argv, env)
    stop = threading.Event()

    def hogging(n: int) -> None:
        while not stop.is_set():
            server.client.chat.completions.create(
                model=model, temperature=0, max_tokens=LONG_TOKENS,
                messages=[{"role": "user", "content": f"Long story {n}: {FILLER}"}],
                extra_headers={"X-Session": "hog"})

    hogs = [threading.Thread(target=hogging, args=(n,), daemon=True)
            for n in range(3 if hog else 0)]
    try:
        for t in hogs:
            t.start()
        time.sleep(1.0 if hog else 0.0)  # the hog's requests in the lane first
        talks: list[list[dict]] = [[] for _ in range(conversations)]
        ttfts: list[float] = []
        for turn in range(rounds):
            for n, messages in enumerate(talks):
                messages.append({"role": "user", "content": f"Short {n}, turn {turn}."})
                ttft, _, reply = timed_turn(server, model, messages, MANY_TOKENS)
                messages.append({"role": "assistant", "content": reply})
                ttfts.append(ttft)
        return p95(ttfts)
    finally:
        stop.set()
        for t in hogs:
            t.join(120)
        server.stop()


def api_decode(argv: list[str], env: dict[str, str], model: str, words: int) -> float:
    """Decode tok/s of 256-token replies through the API, median of 5 (the
    same request each time: the prompt is cached, the decode is what counts)."""
    text = FILLER * (words // len(FILLER.split()) + 1) + "\nSummarize this."
    server = Server(argv, env)
    try:
        return median([timed_turn(server, model, [{"role": "user", "content": text}],
                                  LONG_TOKENS)[1] for _ in range(5)])
    finally:
        server.stop()


def measure(argv: list[str], env: dict[str, str], model: str, words: int) -> dict[str, float]:
    server = Server(argv, env)
    try:
        turn5, ttft5, tps = conversation(server, model, words)
    finally:
        server.stop()
    again = Server(argv, env)
    try:
        restart, _, _ = timed_turn(again, model, turn5)
    finally:
        again.stop()
    return {"turn5": ttft5, "restart": restart, "tps": tps}


def engine_tps(folder: Path, words: int, max_tokens: int = MAX_TOKENS, runs: int = 3
               ) -> float:
    """Decode tok/s of the engine alone on turn 1's prompt."""
    from mlxchat.chat import Message
    from mlxchat.engine.core import ChatEngine
    from mlxchat.engine.events import TextDelta, TurnDone
    from mlxchat.generation import GenerationSettings
    from mlxchat.models import load_folder

    engine = ChatEngine(load_folder(folder))
    try:
        text = FILLER * (words // len(FILLER.split()) + 1) + "\nSummarize this."
        settings = GenerationSettings(temperature=0.0, max_tokens=max_tokens)
        rates = []
        for _ in range(runs):  # timed as through the API: first text to the end
            first = None
            for event in engine.turn([Message("user", text)], settings):
                if isinstance(event, TextDelta) and first is None:
                    first = time.perf_counter()
                elif isinstance(event, TurnDone):
                    span = time.perf_counter() - (first or time.perf_counter())
                    rates.append((event.stats.generated_tokens - 1) / max(span, 1e-9))
        return median(rates)
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--quick", action="store_true", help="a random small llama, ~1k tokens")
    parser.add_argument("--many", type=int, default=20, metavar="N",
                        help="conversations taking turns (default 20)")
    parser.add_argument("--many-words", type=int, default=None, metavar="W",
                        help="words of each one's first message (default: as the 5-turn "
                        "conversation's, ~2k tokens)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of turns (default 3)")
    parser.add_argument("--skip-five", action="store_true",
                        help="leave out the 5-turn conversation and the restart")
    parser.add_argument("--skip-many", action="store_true",
                        help="leave out the many-conversations rotation")
    args = parser.parse_args()
    folder = model_folder("small-llama" if args.quick else args.model)
    words = 400 if args.quick else 1500
    home = tempfile.mkdtemp(prefix="mlxchat-bench-home-")
    env = {**os.environ, "MLXCHAT_HOME": home, "HF_HUB_OFFLINE": "1"}
    ours_argv = [sys.executable, "-m", "mlxchat", "serve", "--model", str(folder)]
    theirs_argv = [sys.executable, "-m", "mlx_lm.server", "--model", str(folder)]
    print(f"model: {folder}")
    ratios: list[str] = []
    if not args.skip_five:
        ours = measure(ours_argv, env, str(folder), words)
        theirs = measure(theirs_argv, env, str(folder), words)
        for name, m in (("mlxchat serve", ours), ("mlx_lm.server", theirs)):
            print(f"{name:14} turn-5 TTFT {m['turn5'] * 1000:8.1f} ms   after restart "
                  f"{m['restart'] * 1000:8.1f} ms   decode {m['tps']:7.1f} tok/s (client-side)")
        print(f"mlx_lm.server restart ratio: {theirs['restart'] / theirs['turn5']:.2f}")
        ratios += [f"api_turn5_ttft_ratio={ours['turn5'] / theirs['turn5']:.3f}",
                   f"api_restart_ttft_ratio={ours['restart'] / ours['turn5']:.3f}"]
    api = api_decode(ours_argv, env, str(folder), words)
    alone = engine_tps(folder, words, LONG_TOKENS, runs=5)
    print(f"{LONG_TOKENS}-token replies: through the API {api:7.1f} tok/s, engine alone "
          f"{alone:7.1f} tok/s (median of 5 each)")
    ratios.append(f"api_overhead={api / alone:.3f}")
    quiet, hogged = (fair(ours_argv, env, str(folder), hog=h) for h in (False, True))
    print(f"short turns (5 conversations, 4 rounds): p95 TTFT {quiet * 1000:.1f} ms alone, "
          f"{hogged * 1000:.1f} ms while one client keeps 3 {LONG_TOKENS}-token replies queued")
    ratios.append(f"api_fair_p95_ttft_ratio={hogged / quiet:.3f}")
    if args.skip_many:
        print("ratios: " + " ".join(ratios))
        return
    many_words = args.many_words or words
    shape = dict(conversations=args.many, words=many_words, rounds=args.rounds)
    mine = many(ours_argv, env, str(folder), **shape)
    base = many(theirs_argv, env, str(folder), **shape)
    roomy = many([*theirs_argv, "--prompt-cache-size", str(args.many)], env, str(folder),
                 **shape)
    print(f"{args.many} conversations, {many_words}-word first messages, "
          f"{args.rounds} rounds in rotation: median TTFT of rounds 2-{args.rounds}")
    for name, m in (("mlxchat serve", mine), ("mlx_lm.server", base),
                    (f"mlx_lm.server --prompt-cache-size {args.many}", roomy)):
        print(f"  {name:38} {m['ttft'] * 1000:9.1f} ms   peak RSS {m['rss'] / 1e6:8.1f} MB")
    ratios += [f"api_many_ttft_ratio={mine['ttft'] / base['ttft']:.3f}",
               f"api_many_peak_rss_ratio={mine['rss'] / base['rss']:.3f}",
               f"api_many_ttft_ratio_vs_cache{args.many}={mine['ttft'] / roomy['ttft']:.3f}"]
    print("ratios: " + " ".join(ratios))


if __name__ == "__main__":
    main()
