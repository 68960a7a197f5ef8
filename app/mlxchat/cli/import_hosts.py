"""`mlxchat import FILE --hosts hosts.json`: import a GGUF (or Ollama model)
on every host of a hostfile, so each rank of a split model finds it under the
same spec. Rank 0 (this machine) imports here with its progress bar; every
other host runs the same `python -m mlxchat import` over ssh (MLX's launch
script, as `--hosts` starts ranks), all at once. Each host needs the file at
the same path; one line per host says what happened.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mlxchat.cli import ranks as launcher
from mlxchat.errors import MlxchatError, user_message

HOST_TIMEOUT_S = 6 * 3600.0
"""A large file converts in minutes; a host silent this long is given up."""


@dataclass(frozen=True)
class HostImport:
    rank: int
    host: str
    ok: bool
    said: str
    """The import's last line: where it went, or why it failed."""

    def line(self) -> str:
        return f"rank {self.rank} {self.host}: {'ok' if self.ok else 'FAIL'} {self.said}"


def _remote(host: Any, argv: list[str], timeout_s: float) -> HostImport:
    from mlx._distributed_utils.launch import RemoteProcess

    local = host.ssh_hostname in ("127.0.0.1", "localhost")
    command = [sys.executable, "-m", "mlxchat", "import", *argv]
    script = RemoteProcess.make_launch_script(host.rank, None, os.getcwd(), {}, [], command,
                                              local)
    cmd = ["bash", "-c", script] if local else \
        ["ssh", "-o", "LogLevel=QUIET", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
         host.ssh_hostname, script]
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout_s, start_new_session=True)
    except subprocess.TimeoutExpired:
        return HostImport(host.rank, host.ssh_hostname, False,
                          f"no answer within {timeout_s:.0f} s")
    except OSError as exc:
        return HostImport(host.rank, host.ssh_hostname, False, f"cannot start ssh: {exc}")
    # The script prints its pid file first; the import's own lines follow.
    out = [ln for ln in done.stdout.splitlines()[1:] if ln.strip()]
    err = [ln for ln in done.stderr.splitlines() if ln.strip()]
    if done.returncode == 0 and out:
        return HostImport(host.rank, host.ssh_hostname, True, out[0])
    why = (err or out or [f"exit status {done.returncode}"])[-1]
    return HostImport(host.rank, host.ssh_hostname, False, why.removeprefix("mlxchat: error: "))


def import_on_hosts(hosts_path: str, argv: list[str], local: Callable[[], str], *,
                    timeout_s: float = HOST_TIMEOUT_S) -> list[HostImport]:
    """Run ``local`` (this machine's import, returning its line) and the same
    import (``argv`` after ``mlxchat import``) on every other host at once."""
    hostfile = launcher.read_hostfile(Path(hosts_path).expanduser())
    others = hostfile.hosts[1:]
    results: list[HostImport | None] = [None] * len(others)

    def run(i: int, host: Any) -> None:
        results[i] = _remote(host, argv, timeout_s)
    threads = [threading.Thread(target=run, args=(i, h), daemon=True)
               for i, h in enumerate(others)]
    for thread in threads:
        thread.start()
    first = hostfile.hosts[0].ssh_hostname
    try:
        mine = HostImport(0, first, True, local())
    except MlxchatError as exc:
        mine = HostImport(0, first, False, user_message(exc) or str(exc))
    for thread in threads:
        thread.join()
    return [mine, *(r for r in results if r is not None)]
