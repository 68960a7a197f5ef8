"""A server dies with the app even when the app is killed (SIGKILL: no
cleanup of its own runs), checked with the OS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from .servers import wait_gone

APP = textwrap.dedent("""
    import json, os, signal, subprocess, sys, time
    from mlxchat.tools.host import ToolHost
    from tests.tools.servers import children, config_of
    host = ToolHost(config_of({"s": {"command": sys.executable,
                                     "args": ["-c", "import time; time.sleep(120)"]}}),
                    log_dir=sys.argv[1])
    host.start(["s"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        relays = children(os.getpid())
        servers = [p for r in relays for p in children(r)]
        if relays and servers:
            break
        time.sleep(0.05)
    print(json.dumps(relays + servers), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_killing_the_app_kills_its_servers(tmp_path):
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root / 'app'}{os.pathsep}{root}"}
    done = subprocess.run([sys.executable, "-c", APP, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, env=env, cwd=root)
    assert done.returncode == -signal.SIGKILL, done.stderr
    pids = json.loads(done.stdout)
    assert len(pids) == 2  # the launcher's relay and the server under it
    assert wait_gone(pids, timeout_s=10) == []
