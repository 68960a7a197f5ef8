"""A model split over 2 local ranks (ring backend on 127.0.0.1, as
``mlxchat --hosts`` starts them) against the same model on 1 rank.

Three runs, each its own process: 1 rank answers a long prompt; 2 ranks
answer it (saving per-rank KV segments); a new 2-rank launch reopens that
session, restores every rank's segments and answers a follow-up.

    tp2_decode_ratio   decode tok/s, 2 ranks / 1 rank (one 2-core machine: < 1)
    tp2_memory_ratio   weights bytes held by rank 0 / by 1 rank (goal <= 0.55)
    tp2_resume_speedup time to the follow-up's first token recomputing the
                       long prompt on 2 ranks / restoring it (goal >= 10)

The model is a random llama whose embeddings are a small share of the
weights (hidden 384, 6 layers, 259-token vocabulary), so the split shows.

    PYTHONPATH=app python bench/distributed.py [--prompt-tokens 1500]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600


def _conversation(engine, db: Path, session_id: int | None = None):
    from mlxchat.config import Settings
    from mlxchat.session.conversation import Conversation
    from mlxchat.store import open_store

    settings = Settings()
    gen = settings.generation
    gen.temperature, gen.max_tokens, gen.seed = 0.0, 64, 0
    store = open_store(db)
    return Conversation(settings=settings, store=store, engine=engine, model_spec="bench",
                        session=None if session_id is None else store.get_session(session_id))


def _turn(conv, text: str) -> dict:
    from mlxchat.engine.events import TurnDone

    done = [e for e in conv.turns.send(text) if isinstance(e, TurnDone)][-1]
    s = done.stats
    return {"ttft_s": s.ttft_s, "decode_tps": s.decode_tps, "generated": s.generated_tokens,
            "prompt": s.prompt_tokens, "prefilled": s.prefilled_tokens,
            "source": s.cache_source, "weights_bytes": s.weights_bytes}


def role(args: argparse.Namespace) -> dict:
    """One run, in this process (rank 0 when ``--hosts``)."""
    prompt = ("The rivers of the north run cold and clear. " * 400)[: args.prompt_tokens]
    db = Path(os.environ["MLXCHAT_HOME"]) / "bench.db"
    if args.hosts is None:
        from mlxchat.engine.core import ChatEngine
        from mlxchat.models import load_folder

        conv = _conversation(ChatEngine(load_folder(Path(args.model), name="bench",
                                                    spec="bench")), db)
        out = _turn(conv, prompt)
        conv.close()
        return out
    from mlxchat.cli.ranks import read_hostfile
    from mlxchat.cli.split import SplitLaunch

    split = SplitLaunch(Path(args.hosts), read_hostfile(args.hosts), rank_timeout_s=120)
    try:
        engine = split.engine(split.load(args.model))
        conv = _conversation(engine, db, args.session)
        if args.session is None:
            out = _turn(conv, prompt)
            out["session"] = conv.session.id
        else:
            t0 = time.perf_counter()
            load = conv.cache.restore()
            restore_s = time.perf_counter() - t0
            out = _turn(conv, "And the mountains?")
            out.update(restore_s=restore_s, restored=bool(load and load.ok))
        conv.close()
    finally:
        split.stop()
    return out


def _spawn(model: Path, home: Path, *extra: str) -> dict:
    out = home / f"run-{time.monotonic_ns()}.json"
    env = dict(os.environ, MLXCHAT_HOME=str(home), HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "app"), str(ROOT)]))
    subprocess.run([sys.executable, __file__, "--role", "--model", str(model), "--out",
                    str(out), *extra], env=env, check=True, timeout=TIMEOUT_S)
    return json.loads(out.read_text())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--role", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model")
    p.add_argument("--out")
    p.add_argument("--hosts")
    p.add_argument("--session", type=int)
    p.add_argument("--prompt-tokens", type=int, default=1500)
    args = p.parse_args()
    if args.role:
        Path(args.out).write_text(json.dumps(role(args)))
        return
    from mlxchat.models.testing.text import write_tiny_model

    work = Path(tempfile.mkdtemp(prefix="mlxchat-bench-dist-"))
    model = write_tiny_model(work / "model", hidden_size=384, num_layers=6, num_heads=6,
                             num_kv_heads=2, intermediate_size=1536, context_window=4096)
    hosts = work / "hosts.json"
    hosts.write_text(json.dumps([{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * 2))
    n = ["--prompt-tokens", str(args.prompt_tokens)]
    one = _spawn(model, work / "one", *n)
    two = _spawn(model, work / "two", "--hosts", str(hosts), *n)
    back = _spawn(model, work / "two", "--hosts", str(hosts), "--session",
                  str(two["session"]), *n)
    resume_s = back["restore_s"] + back["ttft_s"]
    print(f"1 rank:  prompt {one['prompt']} tok, first token {one['ttft_s']:.3f} s, decode "
          f"{one['decode_tps']:.1f} tok/s, weights {one['weights_bytes']:,} B")
    print(f"2 ranks: prompt {two['prompt']} tok, first token {two['ttft_s']:.3f} s, decode "
          f"{two['decode_tps']:.1f} tok/s, weights {two['weights_bytes']:,} B per rank")
    print(f"resumed on a new 2-rank launch: restored={back['restored']} source={back['source']}"
          f" restore {back['restore_s']:.3f} s + first token {back['ttft_s']:.3f} s "
          f"(prefilled {back['prefilled']} of {back['prompt']}) vs recompute "
          f"{two['ttft_s']:.3f} s")
    print(f"ratios: tp2_decode_ratio={two['decode_tps'] / one['decode_tps']:.3f} "
          f"tp2_memory_ratio={two['weights_bytes'] / one['weights_bytes']:.3f} "
          f"tp2_resume_speedup={two['ttft_s'] / resume_s:.1f}")


if __name__ == "__main__":
    main()
