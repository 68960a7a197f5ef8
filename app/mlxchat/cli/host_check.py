"""`mlxchat hosts check hosts.json`: before a split run, per host: does it
answer, does it have the model, does its shard fit its memory, and what does
the link measure (round-trip and bandwidth of an all-reduce over MLX's own
collectives). Every rank runs ``probe``; rank 0 gathers and prints the lines.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxchat.chat import human_bytes
from mlxchat.errors import MlxchatError

FIELDS = 6  # has model, needed bytes, available bytes, round-trip s, bytes/s, answered
BANDWIDTH_BYTES = 8 << 20
JOIN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class HostReport:
    """What one rank measured; ``problem`` is None when the host is fit."""

    rank: int
    host: str
    answered: bool
    has_model: bool
    needed_bytes: int
    available_bytes: int
    round_trip_s: float
    bandwidth_bps: float

    @property
    def problem(self) -> str | None:
        if not self.answered:
            return "does not answer"
        if not self.has_model:
            return "does not have the model"
        if self.available_bytes and self.needed_bytes > self.available_bytes:
            return (f"its shard needs {human_bytes(self.needed_bytes)}, "
                    f"{human_bytes(self.available_bytes)} available")
        return None

    def line(self) -> str:
        head = f"rank {self.rank} {self.host}: "
        if not self.answered or not self.has_model:
            return head + f"FAIL {self.problem}"
        room = human_bytes(self.available_bytes) if self.available_bytes else "unknown"
        facts = (f"shard {human_bytes(self.needed_bytes)} / {room} free · all-reduce "
                 f"{self.round_trip_s * 1e3:.2f} ms round-trip · "
                 f"{self.bandwidth_bps / 1e9:.2f} GB/s")
        return head + ("ok " if self.problem is None else f"FAIL {self.problem} · ") + facts


def _local(spec: str, ranks: int) -> list[float]:
    """Has this host the model, and (bytes its shard needs, bytes it has)."""
    from mlxchat.models import memory, resolve_folder

    os.environ["HF_HUB_OFFLINE"] = "1"  # a check never downloads
    try:
        folder = resolve_folder(spec)
    except MlxchatError:
        return [0.0, 0.0, 0.0]
    room = memory.available_memory()
    return [1.0, float(-(-memory.folder_weights_bytes(folder) // ranks)),
            float(room.bytes if room else 0)]


def _link(group: Any) -> list[float]:
    """Median round-trip of a one-float all-reduce, and the bus rate of an 8 MB one."""
    import mlx.core as mx

    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        mx.eval(mx.distributed.all_sum(mx.ones((1,)), group=group))
        times.append(time.perf_counter() - t0)
    big = mx.ones((BANDWIDTH_BYTES // 4,), dtype=mx.float32)
    mx.eval(mx.distributed.all_sum(big, group=group))  # warm
    t0 = time.perf_counter()
    for _ in range(3):
        mx.eval(mx.distributed.all_sum(big, group=group))
    spent = (time.perf_counter() - t0) / 3
    return [sorted(times)[len(times) // 2], BANDWIDTH_BYTES / spent if spent else 0.0]


def probe(spec: str, group: Any) -> list[list[float]]:
    """Every rank's figures (``FIELDS`` each), gathered on every rank."""
    import mlx.core as mx

    mine = _local(spec, group.size()) + _link(group) + [1.0]
    rows = mx.distributed.all_gather(mx.array([mine], dtype=mx.float32), group=group)
    return [list(map(float, row)) for row in rows.tolist()]


def rank_main(spec: str) -> int:
    """A rank other than 0 of a check: measure, gather, exit."""
    import mlx.core as mx

    group = mx.distributed.init(strict=True, backend=os.environ.get("MLXCHAT_BACKEND", "ring"))
    probe(spec, group)
    return 0


def _answers(host: Any) -> bool:
    from mlxchat.cli.ranks import is_local

    if is_local(host):
        return True
    try:
        return subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
                               host.ssh_hostname, "true"], capture_output=True,
                              timeout=15).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def check(hosts_path: Path, spec: str) -> list[HostReport]:
    from mlxchat.cli import ranks as launcher

    hostfile = launcher.read_hostfile(hosts_path)
    names = [h.ssh_hostname for h in hostfile.hosts]
    answered = [_answers(h) for h in hostfile.hosts]
    if not all(answered):
        return [HostReport(r, n, a, False, 0, 0, 0.0, 0.0)
                for r, (n, a) in enumerate(zip(names, answered))]
    started = launcher.start(hostfile, ["--check", "--model", spec], starting_port=
                             launcher.free_port(sum(len(h.ips) for h in hostfile.hosts)))
    rows: list[list[float]] = []
    try:
        rows = _rank0_probe(spec)
    except RuntimeError as exc:  # the group never formed
        raise launcher.not_joined(exc, hosts_path) from None
    finally:
        started.stop(timeout=5 if rows else 0.1)
    if not rows:
        return [HostReport(r, n, r == 0, False, 0, 0, 0.0, 0.0) for r, n in enumerate(names)]
    return [HostReport(r, n, bool(row[5]), bool(row[0]), int(row[1]), int(row[2]), row[3],
                       row[4]) for r, (n, row) in enumerate(zip(names, rows))]


def _rank0_probe(spec: str) -> list[list[float]]:
    """Rank 0's probe, given up after ``JOIN_TIMEOUT_S`` (a rank that never joins)."""
    import mlx.core as mx

    out: list[list[float]] = []
    failed: list[RuntimeError] = []

    def run() -> None:
        try:
            group = mx.distributed.init(strict=True,
                                        backend=os.environ.get("MLXCHAT_BACKEND", "ring"))
            out.extend(probe(spec, group))
        except RuntimeError as exc:  # said by the caller, never as a thread's traceback
            failed.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(JOIN_TIMEOUT_S)
    if failed:
        raise failed[0]
    return out


def add_hosts_parser(sub: Any) -> None:
    hosts = sub.add_parser("hosts", help="check the hosts of a split model",
                           description="Check an mlx.launch hostfile's hosts for a split model.")
    verbs = hosts.add_subparsers(dest="hosts_command", metavar="VERB", required=True)
    chk = verbs.add_parser("check", help="per host: answers, has the model, has the memory, "
                                         "link round-trip and bandwidth")
    chk.add_argument("hostfile")
    chk.add_argument("--model", "-m", help="the model to check for (default: config)")


def run_hosts(args: argparse.Namespace, model: str) -> int:
    reports = check(Path(args.hostfile).expanduser(), args.model or model)
    for report in reports:
        print(report.line())
    return 0 if all(r.problem is None for r in reports) else 1
