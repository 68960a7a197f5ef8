"""`mlxchat import FILE --hosts hosts.json`: import a GGUF (or Ollama model)
on every host of a hostfile, so each rank of a split model finds it under the
same spec. Rank 0 (this machine) imports here with its progress bar; every
other host runs the same `python -m mlxchat import` over ssh (MLX's launch
script, as `--hosts` starts ranks), all at once. Each host needs the file at
the same path; one line per host says what happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
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


def _remote(host: Any, argv: list[str], timeout_s: float,
            stop: threading.Event) -> HostImport:
    """Run the import on ``host``; on ``stop`` (ctrl-c here) or past
    ``timeout_s``, end it there too (its launch script's pid file)."""
    command = [sys.executable, "-m", "mlxchat", "import", *argv]
    cmd = launcher.launch_argv(host, {}, [], command, batch=True)
    name = host.ssh_hostname
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True)
    except OSError as exc:
        return HostImport(host.rank, name, False, f"cannot start ssh: {exc}")
    pidfile = (proc.stdout.readline() if proc.stdout else "").strip()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            out, err = proc.communicate(timeout=max(0.01, min(0.5, deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            if stop.is_set() or time.monotonic() > deadline:
                _end(proc, host, pidfile)
                why = "stopped" if stop.is_set() else f"no answer within {timeout_s:.0f} s"
                return HostImport(host.rank, name, False, why)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    errors = [ln for ln in err.splitlines() if ln.strip()]
    if proc.returncode == 0 and lines:
        return HostImport(host.rank, name, True, lines[0])
    why = (errors or lines or [f"exit status {proc.returncode}"])[-1]
    return HostImport(host.rank, name, False, why.removeprefix("mlxchat: error: "))


def _end(proc: subprocess.Popen, host: Any, pidfile: str) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=5)
    if pidfile:
        launcher.end_remote(host, pidfile)


def import_on_hosts(hosts_path: str, argv: list[str], local: Callable[[], str], *,
                    timeout_s: float = HOST_TIMEOUT_S) -> list[HostImport]:
    """Run ``local`` (this machine's import, returning its line) and the same
    import (``argv`` after ``mlxchat import``) on every other host at once.
    Ctrl-C here stops them all."""
    hostfile = launcher.read_hostfile(Path(hosts_path).expanduser())
    others = hostfile.hosts[1:]
    results: list[HostImport | None] = [None] * len(others)
    stop = threading.Event()

    def run(i: int, host: Any) -> None:
        try:
            results[i] = _remote(host, argv, timeout_s, stop)
        except Exception as exc:  # noqa: BLE001 - said as that host's failure
            results[i] = HostImport(host.rank, host.ssh_hostname, False,
                                    f"{type(exc).__name__}: {exc}")
    threads = [threading.Thread(target=run, args=(i, h), daemon=True)
               for i, h in enumerate(others)]
    for thread in threads:
        thread.start()
    first = hostfile.hosts[0].ssh_hostname
    try:
        mine = HostImport(0, first, True, local())
    except MlxchatError as exc:
        mine = HostImport(0, first, False, user_message(exc) or str(exc))
    except KeyboardInterrupt:
        stop.set()
        for thread in threads:
            thread.join(30)
        raise
    for thread in threads:
        thread.join()
    return [mine, *(r if r is not None else HostImport(h.rank, h.ssh_hostname, False,
                                                        "no result")
                    for r, h in zip(results, others))]
