"""A chat session on a tiny model, run on one rank or as rank 0 of several.

Under ``mlx.launch`` (or ``ranks.start``) every rank runs this file: ranks
other than 0 serve their shard; rank 0 (or a lone process) opens a
Conversation over a store, sends the messages and writes what each turn
gave to ``--out`` as JSON. The tests compare a split run with a lone one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

MESSAGES = ["Hello there, who are you?", "Tell me about rivers.", "And mountains?",
            "Which is older?", "Thanks, bye."]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--session", default=None, help="reopen this session id")
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--skip", type=int, default=0, help="start at this message (a resume)")
    p.add_argument("--max-tokens", type=int, default=12)
    p.add_argument("--max-reasoning-tokens", type=int, default=4096)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--repetition-penalty", type=float, default=None)
    p.add_argument("--repetition-context", type=int, default=20)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--split", action="store_true", help="join the MLX group (launched ranks)")
    p.add_argument("--kv-bits", type=int, default=None)
    p.add_argument("--cancel-after", type=int, default=None,
                   help="rank 0 cancels the last turn after this many reply tokens")
    p.add_argument("--hosts", default=None, help="start the other ranks from this hostfile")
    p.add_argument("--port", type=int, default=32323, help="the ring's first port (--hosts)")
    p.add_argument("--rank-timeout", type=float, default=30.0)
    p.add_argument("--kill-after", type=int, default=None,
                   help="kill rank 1 when the last turn has shown this many reply tokens")
    return p.parse_args(argv)


def engine_for(args: argparse.Namespace, ranks: list):
    """The engine of this process (rank 0's, or a lone one); a rank other than 0
    serves its shard and exits."""
    if args.hosts:
        from mlxchat.cli import ranks as launcher

        started = launcher.start(launcher.read_hostfile(args.hosts), ["--model", args.model],
                                 starting_port=args.port)
        ranks.append(started)
        Path(args.out + ".pids").write_text(json.dumps([p.pid for p in started.procs]))
    elif not args.split:
        from mlxchat.engine.core import ChatEngine
        from mlxchat.models import load_folder

        return ChatEngine(load_folder(Path(args.model), name="tiny", spec="tiny"))
    from mlxchat.cli.rank import join, serve
    from mlxchat.engine.distributed.channel import Channel
    from mlxchat.engine.distributed.split import split_engine

    joined = join(args.model)
    if joined.rank != 0:
        sys.exit(serve(joined))
    return split_engine(joined.loaded, Channel(joined.group), joined.plan,
                        rank_timeout_s=args.rank_timeout)


def main(argv: list[str] | None = None) -> None:
    from mlxchat.config import Settings
    from mlxchat.engine.events import TextDelta, TurnDone
    from mlxchat.session.conversation import Conversation
    from mlxchat.store import open_store

    args = parse(argv)
    ranks: list = []
    engine = engine_for(args, ranks)
    settings = Settings()
    settings.system_prompt = "Be brief."
    gen = settings.generation
    gen.temperature, gen.max_tokens, gen.seed = args.temperature, args.max_tokens, args.seed
    gen.max_reasoning_tokens = args.max_reasoning_tokens
    gen.kv_bits = args.kv_bits
    gen.repetition_penalty, gen.repetition_context = (args.repetition_penalty,
                                                      args.repetition_context)
    conv = Conversation(settings=settings, store=open_store(Path(args.db)), engine=engine,
                        model_spec="tiny",
                        session=None if args.session is None else
                        open_store(Path(args.db)).get_session(int(args.session)))
    restored = None
    if args.session is not None:
        load = conv.cache.restore()
        restored = None if load is None else {"ok": load.ok, "tokens": load.tokens,
                                              "reason": load.reason}
    turns = []
    for n, text in enumerate(MESSAGES[args.skip:args.turns], args.skip + 1):
        done, shown = None, 0
        t0 = time.perf_counter()
        for event in conv.turns.send(text):
            if isinstance(event, TextDelta):
                shown = event.generated_tokens
                if args.cancel_after and n == args.turns and shown >= args.cancel_after:
                    engine.cancel()
                if args.kill_after and n == args.turns and shown >= args.kill_after and ranks:
                    ranks[0].kill(1)
                    args.kill_after = None
            if isinstance(event, TurnDone):
                done = event
        stats = done.stats
        turns.append({"reply": done.reply, "ids": done.token_ids, "finish": stats.finish_reason,
                      "prompt": stats.prompt_tokens, "prefilled": stats.prefilled_tokens,
                      "reused": stats.reused_tokens, "source": stats.cache_source,
                      "miss": stats.miss_reason, "warning": stats.engine_warning,
                      "snapshot_warning": stats.snapshot_warning, "ttft_s": stats.ttft_s,
                      "decode_tps": stats.decode_tps, "total_s": time.perf_counter() - t0,
                      "weights_bytes": stats.weights_bytes, "kv_bytes": stats.kv_bytes})
    result = {"session": conv.session.id, "turns": turns, "restored": restored,
              "words": conv.cache.words() if args.session is not None else None,
              "weights_bytes": engine.info.weights_bytes, "pid": os.getpid(),
              "layout": engine.state().layout}
    conv.close()
    for started in ranks:
        started.stop()
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
