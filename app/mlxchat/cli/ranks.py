"""Start a split model's ranks from an ``mlx.launch`` hostfile.

The hostfile is mlx.launch's own (``{"backend": "ring", "envs": [...],
"hosts": [{"ssh": "mac1", "ips": ["10.0.0.1"]}, ...]}`` or a bare list of
hosts) and is read with MLX's parser. Rank 0 is this process (it owns the
terminal: the app or ``ask``); every other host gets MLX's own launch script
(over ssh, or bash for 127.0.0.1) running ``python -m mlxchat.cli.rank``.
Unlike mlx.launch, a rank that ends does not take rank 0 down with it: the
turn ends with a message instead.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlxchat.errors import UserError


class HostfileError(UserError):
    """The hostfile cannot be read or used with the chosen backend."""


def read_hostfile(path: str | Path) -> Any:
    """MLX's ``Hostfile`` of ``path``; HostfileError in one line."""
    from mlx._distributed_utils.common import Hostfile

    try:
        hostfile = Hostfile.from_file(str(path))
    except ValueError as exc:
        raise HostfileError(str(exc).splitlines()[0]) from None
    if len(hostfile.hosts) < 2:
        raise HostfileError(f"{path} names {len(hostfile.hosts)} host; splitting needs at least 2")
    return hostfile


def ring_hosts(hostfile: Any, starting_port: int) -> list[list[str]]:
    """The ring backend's address list, as mlx.launch writes it (one port per rank and IP)."""
    out, port = [], starting_port
    for host in hostfile.hosts:
        if not host.ips:
            raise HostfileError(f"host {host.ssh_hostname} has no \"ips\": the ring backend "
                                "needs the addresses the ranks connect over")
        out.append([f"{ip}:{port + i}" for i, ip in enumerate(host.ips)])
        port += len(host.ips)
    return out


def free_port(count: int = 2) -> int:
    """A port on 127.0.0.1 free now, with the ``count - 1`` after it free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + count < 65536 and all(_free(port + i) for i in range(1, count)):
            return port


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@dataclass
class Ranks:
    """The ranks other than 0 started for this process, and their logs."""

    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    hostfile_path: Path | None = None
    killed: set[int] = field(default_factory=set)

    def kill(self, rank: int) -> None:
        """End rank ``rank`` now (tests: a rank lost mid-turn)."""
        os.killpg(self.procs[rank - 1].pid, signal.SIGKILL)
        self.killed.add(rank)

    def stop(self, timeout: float = 10.0) -> None:
        """Wait for the ranks to exit (rank 0 closed them), then end any left."""
        for proc in self.procs:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        for rank, (proc, log) in enumerate(zip(self.procs, self.logs), 1):
            if proc.returncode == 0 or rank in self.killed:
                log.unlink(missing_ok=True)  # kept when a rank failed: its traceback
        if self.hostfile_path is not None:
            self.hostfile_path.unlink(missing_ok=True)


def start(hostfile: Any, worker_args: list[str], *, starting_port: int = 32323,
          python: str | None = None, log_dir: Path | None = None) -> Ranks:
    """Start ranks 1..N-1 and make this process rank 0 of the group (the
    environment ``mx.distributed.init`` reads); ``worker_args`` follow
    ``python -m mlxchat.cli.rank``."""
    from mlx._distributed_utils.launch import RemoteProcess

    backend = hostfile.backend or "ring"
    if backend != "ring":
        raise HostfileError(f"backend {backend!r}: mlxchat --hosts starts the ring backend; "
                            "use mlx.launch for the others")
    fd, name = tempfile.mkstemp(prefix="mlxchat-ring-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(ring_hosts(hostfile, starting_port), fh)
    ranks = Ranks(hostfile_path=Path(name))
    env = list(hostfile.envs) + [f"MLXCHAT_BACKEND={backend}"]
    files = {"MLX_HOSTFILE": Path(name).read_text()}
    command = [python or sys.executable, "-m", "mlxchat.cli.rank", *worker_args]
    folder = Path(log_dir or tempfile.gettempdir())
    for host in hostfile.hosts[1:]:
        local = host.ssh_hostname in ("127.0.0.1", "localhost")
        script = RemoteProcess.make_launch_script(host.rank, None, os.getcwd(), files, env,
                                                  command, local)
        argv = (["bash", "-c", script] if local else
                ["ssh", "-o", "LogLevel=QUIET", host.ssh_hostname, script])
        log = folder / f"mlxchat-rank{host.rank}-{os.getpid()}.log"
        with log.open("w") as out:
            ranks.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=subprocess.STDOUT,
                                                start_new_session=True))
        ranks.logs.append(log)
    os.environ.update(MLX_RANK="0", MLX_HOSTFILE=name, MLXCHAT_BACKEND=backend)
    for item in hostfile.envs:
        key, _, value = item.partition("=")
        os.environ[key] = value
    return ranks
