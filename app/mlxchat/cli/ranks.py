"""Start a split model's ranks from an ``mlx.launch`` hostfile.

The hostfile is mlx.launch's own (``{"backend": "ring", "envs": [...],
"hosts": [{"ssh": "mac1", "ips": ["10.0.0.1"]}, ...]}`` or a bare list of
hosts) and is read with MLX's parser. Its backend is ``ring`` (TCP: Ethernet,
Wi-Fi or Thunderbolt bridges) unless it says ``jaccl`` or ``jaccl-ring`` (RDMA
over Thunderbolt 5; each host lists its ``rdma`` device to every other host,
null for itself, as mlx.launch wants). Rank 0 is this process (it owns the
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

from mlxchat.cli.hostfile_check import HostfileError, check_addresses, check_hostfile


def read_hostfile(path: str | Path) -> Any:
    """MLX's ``Hostfile`` of ``path``, every field checked first; HostfileError
    in one line naming the field."""
    from mlx._distributed_utils.common import Hostfile

    check_hostfile(Path(path))
    try:
        hostfile = Hostfile.from_file(str(path))
    except ValueError as exc:
        raise HostfileError(str(exc).splitlines()[0]) from None
    if len(hostfile.hosts) < 2:
        raise HostfileError(f"{path} names {len(hostfile.hosts)} host; splitting needs at least 2")
    hostfile.source = str(path)  # for the messages of the checks before a launch
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
class StartedRanks:
    """The ranks other than 0 started for this process, and their logs."""

    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    temp_files: list[Path] = field(default_factory=list)
    """Rank 0's copies of the backend's files (its address list, RDMA devices)."""
    killed: set[int] = field(default_factory=set)
    hosts: list[Any] = field(default_factory=list)
    """Each rank's host (a local one's launch files can be removed here)."""

    def kill(self, rank: int) -> None:
        """End rank ``rank`` now (tests: a rank lost mid-turn)."""
        os.killpg(self.procs[rank - 1].pid, signal.SIGKILL)
        self.killed.add(rank)

    def abort(self) -> None:
        """End every rank now (a launch that failed part way), then clean up."""
        for rank, proc in enumerate(self.procs, 1):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.killed.add(rank)
        for host, log in zip(self.hosts, self.logs):
            if not is_local(host):
                pidfile = log.read_text(errors="replace").split("\n", 1)[0].strip() \
                    if log.exists() else ""
                if pidfile:
                    end_remote(host, pidfile)
        self.stop(timeout=5)

    def stop(self, timeout: float = 10.0) -> None:
        """Wait for the ranks to exit (rank 0 closed them), then end any left."""
        for proc in self.procs:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        for rank, (proc, log) in enumerate(zip(self.procs, self.logs), 1):
            if is_local(self.hosts[rank - 1]):  # a rank killed never removed its launch's files
                for path in launch_files(log):
                    path.unlink(missing_ok=True)
            if proc.returncode == 0 or rank in self.killed:
                log.unlink(missing_ok=True)  # kept when a rank failed: its traceback
        for path in self.temp_files:
            path.unlink(missing_ok=True)


BACKENDS = ("ring", "jaccl", "jaccl-ring")


@dataclass(frozen=True)
class Wiring:
    """What every rank needs to join the group: the backend ``mx.distributed``
    starts, environment variables, and files whose paths go in variables."""

    backend: str
    env: list[str]
    files: dict[str, str]


def wiring(hostfile: Any, starting_port: int) -> Wiring:
    """The hostfile's backend set up as mlx.launch does; HostfileError in one line."""
    backend = hostfile.backend or "ring"
    if backend == "ring":
        return Wiring("ring", [], {"MLX_HOSTFILE": json.dumps(ring_hosts(hostfile,
                                                                         starting_port))})
    if backend not in BACKENDS:
        raise HostfileError(f"backend {backend!r}: mlxchat --hosts starts {', '.join(BACKENDS)}; "
                            "use mlx.launch for the others")
    hosts = hostfile.hosts
    if not hosts[0].ips:
        raise HostfileError(f"host {hosts[0].ssh_hostname} (rank 0) has no \"ips\": JACCL's "
                            "coordinator needs an address every rank reaches")
    n = len(hosts)
    for i, host in enumerate(hosts):
        if len(host.rdma) != n:
            raise HostfileError(f"host {host.ssh_hostname} lists {len(host.rdma)} RDMA devices; "
                                f"JACCL needs one per host ({n}), null for itself")
        if host.rdma[i] is not None:
            raise HostfileError(f"host {host.ssh_hostname}'s RDMA device to itself must be null")
    peers = (lambda i: ((i - 1) % n, (i + 1) % n)) if backend == "jaccl-ring" else \
        (lambda i: range(n))
    missing = [(i, j) for i in range(n) for j in peers(i) if i != j and hosts[i].rdma[j] is None]
    if missing:
        i, j = missing[0]
        raise HostfileError(f"no RDMA device is listed from {hosts[i].ssh_hostname} to "
                            f"{hosts[j].ssh_hostname}" + (f" (and {len(missing) - 1} more)"
                                                          if len(missing) > 1 else ""))
    env = [f"MLX_JACCL_COORDINATOR={hosts[0].ips[0]}:{starting_port}"]
    if backend == "jaccl-ring":
        env.append("MLX_JACCL_RING=1")
    return Wiring("jaccl", env, {"MLX_IBV_DEVICES": json.dumps([h.rdma for h in hosts])})


def not_joined(exc: BaseException, hosts_path: Any) -> HostfileError:
    """The one line for a group that could not form after the ranks started
    (an address that does not answer, a rank that failed: its log says why)."""
    said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return HostfileError(f"the ranks of {hosts_path} could not connect ({said}); check that "
                         "every host's \"ips\" can be reached from the others")


def check_available(backend: str) -> None:
    """This machine's MLX can start ``backend`` (JACCL needs macOS with
    Thunderbolt 5 RDMA enabled); one line when not."""
    import mlx.core as mx

    if not mx.distributed.is_available(backend=backend):
        raise HostfileError(f"the {backend} backend is not available in this MLX build or on "
                            "this machine (JACCL needs macOS 26.2 or later and Thunderbolt 5 "
                            "with RDMA enabled); use \"backend\": \"ring\"")


LAUNCH_FILES = "MLXCHAT_LAUNCH_FILES"
"""The temp files a rank's launch script made, space-separated."""


def _temp_files(words: str) -> list[Path]:
    """The paths in ``words`` that are mktemp's files in the temp folder (nothing else)."""
    temp = Path(tempfile.gettempdir())
    return [Path(p) for p in words.split()
            if Path(p).parent == temp and Path(p).name.startswith("tmp.")]


def launch_files(log: Path) -> list[Path]:
    """The temp files a rank's launch script named on its second line (its log's)."""
    try:
        with log.open(encoding="utf-8", errors="replace") as fh:
            lines = [fh.readline() for _ in range(2)]
    except OSError:
        return []
    return _temp_files(lines[1])


def remove_own_launch_files() -> None:
    """At the exit of a process a launch script started: its temp files go."""
    for path in _temp_files(os.environ.get(LAUNCH_FILES, "")):
        path.unlink(missing_ok=True)


def is_local(host: Any) -> bool:
    """This machine: started with bash instead of ssh."""
    return host.ssh_hostname in ("127.0.0.1", "localhost")


def launch_argv(host: Any, files: dict[str, str], env: list[str], command: list[str], *,
                batch: bool = False) -> list[str]:
    """The argv that runs ``command`` on ``host`` through MLX's launch script
    (which prints its pid file first); ``batch``: ssh never asks for a password."""
    from mlx._distributed_utils.launch import RemoteProcess

    script = RemoteProcess.make_launch_script(host.rank, None, os.getcwd(), files, env,
                                              command, is_local(host))
    # The script's mktemp files (its pid file, the backend's files) outlive the
    # process it starts: it names them to that process (which removes them at
    # exit) and on stderr after its pid file's line (rank 0 removes a killed
    # local rank's).
    named = "$pidfile" + "".join(f" ${name}" for name in files)
    script = script.replace("export MLX_RANK=", f'export {LAUNCH_FILES}="{named}"; '
                            f'printf "%s\\n" "${LAUNCH_FILES}" >&2; export MLX_RANK=', 1)
    if is_local(host):
        return ["bash", "-c", script]
    options = ["-o", "LogLevel=QUIET"]
    if batch:
        options += ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    return ["ssh", *options, host.ssh_hostname, script]


def end_remote(host: Any, pidfile: str, timeout_s: float = 15.0) -> None:
    """End what a launch script started on ``host`` (its pid file), as
    mlx.launch does when it stops; a host that does not answer is left."""
    from mlx._distributed_utils.launch import RemoteProcess

    script = RemoteProcess.make_kill_script(pidfile)
    argv = ["bash", "-c", script] if is_local(host) else \
        ["ssh", "-o", "LogLevel=QUIET", "-o", "BatchMode=yes", host.ssh_hostname, script]
    try:
        subprocess.run(argv, capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        pass


def start(hostfile: Any, worker_args: list[str], *, starting_port: int = 32323,
          python: str | None = None, log_dir: Path | None = None) -> StartedRanks:
    """Start ranks 1..N-1 and make this process rank 0 of the group (the
    environment ``mx.distributed.init`` reads); ``worker_args`` follow
    ``python -m mlxchat.cli.rank``."""
    wired = wiring(hostfile, starting_port)
    check_available(wired.backend)
    check_addresses(hostfile.hosts, getattr(hostfile, "source", None))
    ranks = StartedRanks()
    try:
        _launch(ranks, hostfile, wired, worker_args, python, log_dir)
    except BaseException:
        ranks.abort()  # nothing started stays running, nothing made stays behind
        raise
    return ranks


def _launch(ranks: StartedRanks, hostfile: Any, wired: Wiring, worker_args: list[str],
            python: str | None, log_dir: Path | None) -> None:
    local_files = {}
    for variable, content in wired.files.items():  # rank 0's copies, removed at stop
        fd, name = tempfile.mkstemp(prefix=f"mlxchat-{variable.lower()}-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            fh.write(content)
        local_files[variable] = name
        ranks.temp_files.append(Path(name))
    env = list(hostfile.envs) + wired.env + [f"MLXCHAT_BACKEND={wired.backend}"]
    command = [python or sys.executable, "-m", "mlxchat.cli.rank", *worker_args]
    folder = Path(log_dir or tempfile.gettempdir())
    for host in hostfile.hosts[1:]:
        argv = launch_argv(host, wired.files, env, command)
        log = folder / f"mlxchat-rank{host.rank}-{os.getpid()}.log"
        with log.open("w") as out:
            ranks.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=subprocess.STDOUT,
                                                start_new_session=True))
        ranks.logs.append(log)
        ranks.hosts.append(host)
    os.environ.update(MLX_RANK="0", MLXCHAT_BACKEND=wired.backend, **local_files)
    for item in [*hostfile.envs, *wired.env]:
        key, _, value = item.partition("=")
        os.environ[key] = value
