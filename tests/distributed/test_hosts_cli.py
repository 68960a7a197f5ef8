"""`mlxchat ask --hosts hosts.json`: rank 0 starts rank 1 from a 2-host
localhost hostfile, answers as one rank does, resumes the next run from its
per-rank segments, and leaves no rank running. Each run is a subprocess
bounded in time; any rank found afterwards (by its model path) is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.bounded import communicate

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 240


def rank_pids(model: Path) -> list[int]:
    """Processes serving a rank of ``model`` (its path is unique to the test)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mlxchat.cli.rank" in argv and str(model).encode() in argv:
            found.append(int(entry.name))
    return found


def ask(model: Path, home: Path, prompt: str, *args: str) -> dict:
    env = dict(os.environ, MLXCHAT_HOME=str(home), HF_HUB_OFFLINE="1",
               PYTHONPATH=str(ROOT / "app"))
    cmd = [sys.executable, "-m", "mlxchat", "ask", "--model", str(model), "--json",
           "--temp", "0", "--max-tokens", "8", "--session", "s", *args, prompt]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, text=True)
    try:
        out, err = communicate(proc, TIMEOUT_S)
    finally:
        left = rank_pids(model)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"ranks still running after ask: {left}"
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    from mlxchat.models.tiny import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("hosts-llama"))


def test_ask_hosts_answers_as_one_rank_and_resumes_from_rank_segments(llama, tmp_path):
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"backend": "ring",
                                 "hosts": [{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * 2}))
    one = [ask(llama, tmp_path / "one", p) for p in ("Hello there", "Tell me more")]
    two = [ask(llama, tmp_path / "two", p, "--hosts", str(hosts))
           for p in ("Hello there", "Tell me more")]
    assert [t["reply"] for t in two] == [t["reply"] for t in one]
    assert two[0]["layout"].startswith("2 ranks · tensor · ") and \
        two[0]["layout"].endswith(" each")
    assert two[0]["weights_bytes"] < 0.75 * one[0]["weights_bytes"]
    # Each rank's own figures, measured there after the turn: its shard, its KV.
    ranks = two[0]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["weights_bytes"] == two[0]["weights_bytes"]
    assert ranks[1]["weights_bytes"] == ranks[0]["weights_bytes"]  # an even tensor split
    assert ranks[0]["kv_bytes"] == two[0]["kv_bytes"] > 0
    assert ranks[1]["kv_bytes"] == ranks[0]["kv_bytes"]  # each holds half the KV heads
    assert all(r["peak_memory_bytes"] >= r["weights_bytes"] for r in ranks)
    assert one[0].get("ranks") is None
    # The second run is a new launch: it restores every rank's segment, then
    # prefills only the new message.
    assert two[1]["cache_source"] == "snapshot" and two[1]["snapshot"]["ok"]
    assert two[1]["prefilled_tokens"] == one[1]["prefilled_tokens"] < two[1]["prompt_tokens"]
    snapshots = {p.name for p in (tmp_path / "two" / "data" / "snapshots").iterdir()}
    assert sum(n.endswith(".ranks.json") for n in snapshots) == 2
    assert sum(".rank1of2." in n for n in snapshots) == 2


def test_ask_hosts_refuses_a_missing_or_short_hostfile(llama, tmp_path):
    env = dict(os.environ, MLXCHAT_HOME=str(tmp_path / "h"), PYTHONPATH=str(ROOT / "app"))
    one_host = tmp_path / "one.json"
    one_host.write_text(json.dumps([{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}]))
    for hosts, said in ((tmp_path / "none.json", "no such file"),
                        (one_host, "names 1 host; splitting needs at least 2")):
        proc = subprocess.run([sys.executable, "-m", "mlxchat", "ask", "--model", str(llama),
                               "--hosts", str(hosts), "hi"], env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 1 and said in proc.stderr
        assert proc.stderr.count("\n") == 1
