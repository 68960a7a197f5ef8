"""`--hosts hosts.json`: the app or `ask` as rank 0 of a model split over the
hostfile's hosts. The loader ``open_conversation`` calls starts the other
ranks (``ranks.start``) with the spec it resolved, then joins the group and
loads rank 0's shard; the engine factory makes it a split engine (``split_engine``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlxchat.cli import ranks as launcher
from mlxchat.errors import UsageError, UserError


@dataclass
class SplitLaunch:
    """The ranks one ``--hosts`` run started, and how rank 0 joins them."""

    hosts_path: Path
    hostfile: Any
    rank_timeout_s: float = 30.0
    started: launcher.StartedRanks | None = None
    joined: Any = None
    _plans: dict[int, Any] = field(default_factory=dict)

    def load(self, spec: str, progress: Any = None) -> Any:
        """Start the other ranks on ``spec`` and load rank 0's shard (once)."""
        from mlxchat.cli.rank import join

        if self.started is not None:
            raise UserError("switching models is not available with a model split across "
                            "ranks: every rank loaded its shard at start; restart with "
                            "--model SPEC")
        self.started = launcher.start(self.hostfile, ["--model", spec],
                                      starting_port=launcher.free_port(
                                          sum(len(h.ips) for h in self.hostfile.hosts)))
        try:
            self.joined = join(spec)
        except RuntimeError as exc:  # MLX's own, from the backend's connect
            raise launcher.not_joined(exc, self.hosts_path) from None
        return self.joined.loaded

    def engine(self, loaded: Any) -> Any:
        from mlxchat.engine.distributed.channel import Channel
        from mlxchat.engine.distributed.split import split_engine

        joined = self.joined
        return split_engine(loaded, Channel(joined.group), joined.plan,
                            rank_timeout_s=self.rank_timeout_s)

    def stop(self) -> None:
        """Wait for the ranks rank 0's engine closed; end any still running."""
        if self.started is not None:
            self.started.stop()


@contextlib.contextmanager
def split_launch(hosts: str | None, *, rank_timeout_s: float = 30.0
                 ) -> Iterator[SplitLaunch | None]:
    """A ``SplitLaunch`` for ``--hosts`` (None without it); its ranks are
    stopped when the block ends, however it ends."""
    if hosts is None:
        yield None
        return
    path = Path(hosts).expanduser()
    if not path.is_file():
        raise UsageError(f"--hosts {hosts}: no such file")
    if not rank_timeout_s > 0:
        raise UsageError(f"--rank-timeout must be above 0 seconds; got {rank_timeout_s:g}")
    split = SplitLaunch(path, launcher.read_hostfile(path), rank_timeout_s=rank_timeout_s)
    try:
        yield split
    finally:
        split.stop()


def factories(split: SplitLaunch | None) -> dict[str, Any]:
    """``open_conversation``'s loader and engine factory for ``split`` ({} without)."""
    if split is None:
        return {}
    return {"load_model": split.load, "engine_factory": split.engine}
