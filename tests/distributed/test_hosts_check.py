"""`mlxchat hosts check`: 2 localhost ranks measure an all-reduce and report
per host; a host without the model, or without room for its shard, fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlxchat.cli.host_check import HostReport

from tests.distributed.test_hosts_cli import ROOT, rank_pids


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    from mlxchat.models.testing.text import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("check-llama"))


def check(hosts: Path, model: Path, home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MLXCHAT_HOME=str(home), PYTHONPATH=str(ROOT / "app"))
    try:
        return subprocess.run([sys.executable, "-m", "mlxchat", "hosts", "check", str(hosts),
                               "--model", str(model)], env=env, capture_output=True,
                              text=True, timeout=120)
    finally:
        for pid in rank_pids(model):
            os.kill(pid, 9)


def test_two_local_hosts_are_checked_one_line_each(llama, tmp_path):
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps([{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * 2))
    ok = check(hosts, llama, tmp_path / "h")
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["rank 0 127.0.0.1", "rank 1 127.0.0.1"]
    assert all(" ok shard " in line and " ms round-trip · " in line and line.endswith(" GB/s")
               for line in lines)
    missing = check(hosts, tmp_path / "no-such-model", tmp_path / "h")
    assert missing.returncode == 1
    assert missing.stdout.splitlines() == [f"rank {r} 127.0.0.1: FAIL does not have the model"
                                           for r in (0, 1)]


def test_a_shard_larger_than_the_memory_fails_with_the_numbers():
    report = HostReport(1, "mac2", True, True, 3 << 30, 2 << 30, 0.001, 2e9)
    assert report.problem == "its shard needs 3.2 GB, 2.1 GB available"
    assert report.line().startswith("rank 1 mac2: FAIL its shard needs 3.2 GB, 2.1 GB available")
    assert HostReport(0, "mac1", False, False, 0, 0, 0, 0).line() == \
        "rank 0 mac1: FAIL does not answer"
