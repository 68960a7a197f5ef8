"""One rank of a model split over several processes or Macs.

Every rank joins MLX's distributed group (the ring backend unless the
launcher chose another) and loads its own shard. Rank 0 is the app; the
others run ``serve``: the job loop of ``engine.rank_worker``, until rank 0
closes it or goes away. ``python -m mlxchat.cli.rank --model SPEC`` is what
``mlxchat --hosts`` starts on each other host.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from mlxchat.errors import MlxchatError

log = logging.getLogger(__name__)


@dataclass
class Joined:
    """This process's place in the group and its shard of the model."""

    group: Any
    loaded: Any
    """A ``LoadedModel`` holding this rank's shard."""
    plan: Any
    """The ``ShardPlan`` every rank computed alike from the config."""

    @property
    def rank(self) -> int:
        return int(self.group.rank())


def join(spec: str, *, mode: str | None = None, backend: str | None = None) -> Joined:
    """Join the group the launcher described (MLX_RANK, MLX_HOSTFILE, ...) and
    load this rank's shard; ModelError when the model cannot be split so."""
    import mlx.core as mx

    from mlxchat.models import load_sharded

    group = mx.distributed.init(strict=True, backend=backend or os.environ.get(
        "MLXCHAT_BACKEND", "ring"))
    loaded, plan = load_sharded(spec, group, mode=mode)
    return Joined(group, loaded, plan)


def serve(joined: Joined) -> int:
    """Do rank 0's jobs until it closes this rank (0) or is lost (1)."""
    from mlxchat.engine.distributed.channel import Channel, RankLost
    from mlxchat.engine.distributed.rank_files import WORKER_JOBS
    from mlxchat.engine.distributed.rank_worker import RankWorker

    worker = RankWorker(joined.loaded, Channel(joined.group), segment_jobs=WORKER_JOBS)
    try:
        stats = worker.run()
    except RankLost as exc:
        print(f"mlxchat rank {joined.rank}: {exc}", file=sys.stderr)
        return 1
    log.info("rank %d done: %s", joined.rank, stats)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlxchat.cli.rank",
                                     description="serve one rank of a split model")
    parser.add_argument("--model", required=True, help="the same spec rank 0 loads")
    parser.add_argument("--mode", choices=("tensor", "pipeline"), default=None)
    parser.add_argument("--check", action="store_true",
                        help="measure for `mlxchat hosts check` instead of serving")
    args = parser.parse_args(argv)
    import atexit

    from mlxchat.cli.ranks import remove_own_launch_files

    atexit.register(remove_own_launch_files)
    if args.check:
        from mlxchat.cli.host_check import rank_main

        return rank_main(args.model)
    try:
        joined = join(args.model, mode=args.mode)
    except MlxchatError as exc:
        print(f"mlxchat rank {os.environ.get('MLX_RANK', '?')}: {exc}", file=sys.stderr)
        return 2
    return serve(joined)


if __name__ == "__main__":
    sys.exit(main())
