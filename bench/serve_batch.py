"""Many conversations at once: N clients each send a different short question
at the same moment and stream a reply, against `mlxchat serve` (its default
--parallel) and `mlx_lm.server` (its defaults: batching on), on the same model
folder, both real processes on loopback. The load average is printed with
each figure (a busy machine slows both).

    .venv/bin/python bench/serve_batch.py [--quick] [--model smollm2-135m]
        [--sizes 1,2,4,8] [--tokens 128] [--parallel N] [--ours-only]

--quick: sizes 1 and 8, 32-token replies. The last line is: ratios:
api_batch_throughput_ratio_8=X (aggregate tok/s at 8, ours / mlx_lm.server's)
api_batch_scaling_8=X (ours at 8 / ours at 1) api_batch_ttft_p95_ratio=X
(p95 TTFT at 8, ours / theirs).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from serve import Server, model_folder, p95  # noqa: E402

QUESTIONS = ("What is a river delta?", "Name three kinds of clouds.", "How do bees make honey?",
             "Why do leaves change colour?", "What is a prime number?",
             "How does a lighthouse work?", "What do owls eat at night?",
             "Why is the sea salty?")


def burst(server: Server, model: str, n: int, tokens: int) -> dict[str, object]:
    """``n`` streamed requests started together: aggregate tok/s (first start to
    last end) and each one's TTFT."""
    ttfts: list[float] = [float("nan")] * n
    counts = [0] * n
    go = threading.Barrier(n + 1)

    def one(i: int) -> None:
        go.wait()
        start = time.perf_counter()
        for chunk in server.client.chat.completions.create(
                model=model, temperature=0, max_tokens=tokens, stream=True,
                messages=[{"role": "user", "content": f"({i}) {QUESTIONS[i % len(QUESTIONS)]}"}],
                stream_options={"include_usage": True}):
            if chunk.choices and chunk.choices[0].delta.content and ttfts[i] != ttfts[i]:
                ttfts[i] = time.perf_counter() - start
            if getattr(chunk, "usage", None):
                counts[i] = chunk.usage.completion_tokens
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    go.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    return {"tps": sum(counts) / seconds, "ttfts": sorted(ttfts), "tokens": sum(counts),
            "load": os.getloadavg()[0]}


def measure(argv: list[str], env: dict[str, str], model: str, sizes: list[int],
            tokens: int, name: str) -> dict[int, dict[str, object]]:
    server = Server(argv, env)
    try:
        burst(server, model, 1, 4)  # the first request's one-time costs, untimed
        out = {}
        for n in sizes:
            out[n] = m = burst(server, model, n, tokens)
            ttfts = ", ".join(f"{t:.1f}" for t in m["ttfts"])  # type: ignore[union-attr]
            print(f"{name:14} {n} at once: {m['tps']:6.1f} tok/s aggregate "
                  f"({m['tokens']} tokens), TTFT s: {ttfts}; load {m['load']:.2f}", flush=True)
        return out
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--quick", action="store_true", help="sizes 1 and 8, 32-token replies")
    parser.add_argument("--sizes", default="1,2,4,8")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--parallel", type=int, default=None,
                        help="ours: --parallel N (default: the server's own)")
    parser.add_argument("--ours-only", action="store_true",
                        help="leave mlx_lm.server out (choosing --parallel)")
    args = parser.parse_args()
    sizes = [1, 8] if args.quick else [int(s) for s in args.sizes.split(",")]
    tokens = 32 if args.quick else args.tokens
    folder = model_folder(args.model)
    home = tempfile.mkdtemp(prefix="mlxchat-bench-home-")
    env = {**os.environ, "MLXCHAT_HOME": home, "HF_HUB_OFFLINE": "1"}
    ours_argv = [sys.executable, "-m", "mlxchat", "serve", "--model", str(folder)]
    if args.parallel:
        ours_argv += ["--parallel", str(args.parallel)]
    theirs_argv = [sys.executable, "-m", "mlx_lm.server", "--model", str(folder)]
    print(f"model: {folder}; {tokens}-token streamed replies; load {os.getloadavg()[0]:.2f}")
    ours = measure(ours_argv, env, str(folder), sizes, tokens, "mlxchat serve")
    if args.ours_only:
        return
    theirs = measure(theirs_argv, env, str(folder), sizes, tokens, "mlx_lm.server")
    top = max(sizes)
    ratios = [f"api_batch_throughput_ratio_{top}="
              f"{ours[top]['tps'] / theirs[top]['tps']:.3f}",  # type: ignore[operator]
              f"api_batch_scaling_{top}={ours[top]['tps'] / ours[min(sizes)]['tps']:.3f}",  # type: ignore[operator]
              f"api_batch_ttft_p95_ratio={p95(ours[top]['ttfts']) / p95(theirs[top]['ttfts']):.3f}"]  # type: ignore[arg-type]
    print("ratios: " + " ".join(ratios))


if __name__ == "__main__":
    main()
