"""End-to-end: the real `mlxchat` TUI in tmux on the bundled model. Ask, read
the gauges, quit; reopen with --continue and find the follow-up answered from
the restored KV snapshot, prefilling only the new message."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.bundled


class Tmux:
    def __init__(self, name: str):
        self.sock = ["tmux", "-L", name]
        self.name = name

    def start(self, command: str, env: dict[str, str]) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # COLUMNS/LINES from the test runner would override the pane's real size.
        script = (f"cd {shlex.quote(os.getcwd())} && env -u COLUMNS -u LINES {exports} "
                  f"{command}; echo MLXCHAT-EXITED; sleep 60")
        subprocess.run(self.sock + ["new-session", "-d", "-s", self.name, "-x", "160", "-y", "45",
                                    script], check=True)

    def screen(self) -> str:
        return subprocess.run(self.sock + ["capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(self.sock + ["send-keys", "-t", self.name, *keys], check=True)

    def type(self, text: str) -> None:
        subprocess.run(self.sock + ["send-keys", "-t", self.name, "-l", text], check=True)
        self.keys("Enter")

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.screen())
            if found:
                return found
            time.sleep(0.3)
        raise AssertionError(f"{pattern!r} never appeared; screen:\n{self.screen()}")

    def kill(self) -> None:
        subprocess.run(self.sock + ["kill-server"], capture_output=True)


@pytest.fixture
def tmux_factory():
    """A new tmux server per start: reusing a socket right after kill-server races."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for this test (`make test` installs it)")
    made: list[Tmux] = []

    def make() -> Tmux:
        made.append(Tmux(f"mlxchat-e2e-{os.getpid()}-{len(made)}"))
        return made[-1]
    yield make
    for t in made:
        t.kill()


STATS = r"ttft [\d.]+ m?s · [\d.]+ tok/s · \d+ tokens · reused (\d+) / prefilled (\d+) · ([a-z ]+)"


def test_ask_quit_continue_resumes_from_snapshot(tmux_factory, bundled_model_dir, mlxchat_home):
    env = {"MLXCHAT_HOME": str(mlxchat_home), "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color"}
    app = f"{shlex.quote(sys.executable)} -m mlxchat"
    tmux = tmux_factory()
    tmux.start(app, env)
    tmux.wait_for(r"0 / 8,192 tokens")
    tmux.type("/set max_tokens 12")
    tmux.wait_for(r"max_tokens = 12")
    tmux.type("/set temperature 0")
    tmux.wait_for(r"temperature = 0")
    tmux.type("Name a colour.")
    first = tmux.wait_for(STATS, timeout=180)
    assert first.group(3).strip() == "cold start" and first.group(1) == "0"
    screen = tmux.screen()
    used = int(re.search(r"(\d+) / 8,192 tokens", screen).group(1))
    assert used > int(first.group(2))  # the prompt plus the reply are cached
    assert re.search(r"warm cache · %d tokens" % used, screen)
    assert re.search(r"first token\s+[\d.]+ m?s", screen) and re.search(r"decode\s+[\d.]+ tok/s", screen)

    tmux.keys("C-q")
    tmux.wait_for("MLXCHAT-EXITED", timeout=30)
    tmux.kill()

    tmux = tmux_factory()
    tmux.start(f"{app} --continue", env)
    tmux.wait_for(r"from snapshot · %d tokens" % used)
    tmux.type("And another one?")
    deadline = time.monotonic() + 180
    while True:
        stats = re.findall(STATS, tmux.screen())
        if len(stats) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert len(stats) >= 2, tmux.screen()
    reused, prefilled, source = stats[-1]
    assert source.strip() == "from snapshot"
    assert int(reused) == used
    assert 0 < int(prefilled) < 25  # only the new message and its template tokens
    assert Path(mlxchat_home, "data", "sessions.db").exists()
