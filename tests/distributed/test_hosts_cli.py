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
import tempfile
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


def ask_process(model: Path, home: Path, prompt: str, *args: str,
                max_tokens: int = 8, temp: float = 0) -> tuple[subprocess.Popen, Path]:
    """`ask --json` started, with a temp folder of its own (every rank's too)."""
    temp_dir = home / "tmp"
    temp_dir.mkdir(parents=True, exist_ok=True)
    kernels = Path(tempfile.gettempdir()) / "mlx"  # MLX's compiled kernels: kept warm
    kernels.mkdir(exist_ok=True)
    if not (temp_dir / "mlx").exists():
        (temp_dir / "mlx").symlink_to(kernels, target_is_directory=True)
    env = dict(os.environ, MLXCHAT_HOME=str(home), HF_HUB_OFFLINE="1",
               PYTHONPATH=str(ROOT / "app"), TMPDIR=str(temp_dir))
    cmd = [sys.executable, "-m", "mlxchat", "ask", "--model", str(model), "--json",
           "--temp", str(temp), "--max-tokens", str(max_tokens), "--session", "s", *args,
           prompt]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, text=True), temp_dir


def finish(proc: subprocess.Popen, model: Path, temp_dir: Path, *,
           lost_rank: bool = False) -> tuple[str, str]:
    """Its output, once it ended: no rank left running, nothing left in its temp
    folder but MLX's kernel cache (and a lost rank's log, kept to say why)."""
    try:
        out, err = communicate(proc, TIMEOUT_S)
    finally:
        left = rank_pids(model)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"ranks still running after ask: {left}"
    kept = [n for n in os.listdir(temp_dir) if n != "mlx"
            and not (lost_rank and n.startswith("mlxchat-rank1-") and n.endswith(".log"))]
    assert kept == [], "temp files left: " + ", ".join(kept)
    return out, err


def ask(model: Path, home: Path, prompt: str, *args: str) -> dict:
    proc, temp_dir = ask_process(model, home, prompt, *args)
    out, err = finish(proc, model, temp_dir)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    from mlxchat.models.testing.text import write_tiny_model

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
    for hosts, said, status in ((tmp_path / "none.json", "no such file", 2),  # bad argument
                                (one_host, "names 1 host; splitting needs at least 2", 1)):
        proc = subprocess.run([sys.executable, "-m", "mlxchat", "ask", "--model", str(llama),
                               "--hosts", str(hosts), "hi"], env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == status and said in proc.stderr
        assert proc.stderr.count("\n") == 1


def test_a_rank_lost_mid_turn_is_said_on_stderr_and_in_json(tmp_path, mlxchat_home):
    """Killed mid-reply, rank 1 takes the turn down: one line says so on stderr
    and in --json, with the turn's figures, and the exit status is 3, not
    ctrl-c's 130; every rank and temp file is gone afterwards."""
    import time

    from mlxchat import paths
    from mlxchat.store import open_store

    from tests.long_replies import never_ending

    model = never_ending(tmp_path / "long-llama")
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps({"hosts": [{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * 2}))
    proc, temp_dir = ask_process(model, mlxchat_home, "Tell me everything.", "--hosts",
                                 str(hosts), "--rank-timeout", "15", max_tokens=12000,
                                 temp=0.8)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:  # the reply streams once its first checkpoint is in the database
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            db = paths.database_file()
            if db.exists():
                with open_store() as store:
                    if store.drafts.left():
                        break
            time.sleep(0.2)
        [rank1] = rank_pids(model)
        os.kill(rank1, signal.SIGKILL)
    finally:
        out, err = finish(proc, model, temp_dir, lost_rank=True)
    assert proc.returncode == 3, err[-3000:]
    said = json.loads(out)
    warning = said["engine_warning"]
    assert warning.endswith("the reply was cut short and kept as cancelled")
    assert f"mlxchat: {warning}\n" in err
    assert said["finish_reason"] == "cancelled" and said["reply"]
    assert said["prompt_tokens"] > 0 and said["context_window"] == 16384
