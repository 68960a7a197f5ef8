"""A model split over 2 local ranks (the ring backend on 127.0.0.1) answers
token for token as one rank does, resumes from its per-rank KV segments,
recomputes on another layout, and survives a rank lost mid-turn.

Each launch is a subprocess bounded in time; every process it started is
ended by pid afterwards (the launcher's own and the ranks rank 0 started).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mlxchat.cli.ranks import free_port

from tests.distributed.bounded import communicate

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).with_name("scenario.py")
PYTHON = sys.executable
LAUNCH = Path(PYTHON).with_name("mlx.launch")
TIMEOUT_S = 300  # a loaded 2-core machine: a launch takes 20-60 s


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, MLXCHAT_HOME=str(home), HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "app"), str(ROOT)]))
    return env


def _run(cmd: list[str], home: Path, out: Path) -> dict:
    proc = subprocess.Popen(cmd, env=_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, text=True)
    try:
        log, _ = communicate(proc, TIMEOUT_S)
    finally:
        _end_ranks(out)
    assert proc.returncode == 0 and out.exists(), log[-3000:]
    return json.loads(out.read_text())


def _end_ranks(out: Path) -> None:
    """End the ranks rank 0 started, if any outlived it."""
    pids = out.with_name(out.name + ".pids")
    for pid in (json.loads(pids.read_text()) if pids.exists() else []):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def lone(model: Path, home: Path, out: Path, *args: str) -> dict:
    """The scenario on one rank, in its own process."""
    return _run([PYTHON, str(SCENARIO), "--model", str(model), "--out", str(out),
                 "--db", str(home / "s.db"), *args], home, out)


def launched(model: Path, home: Path, out: Path, *args: str) -> dict:
    """The scenario on 2 ranks started by mlx.launch (ring, 127.0.0.1)."""
    return _run([str(LAUNCH), "-n", "2", "--backend", "ring", "--starting-port",
                 str(free_port(2)), "--", PYTHON, str(SCENARIO), "--split", "--model", str(model),
                 "--out", str(out), "--db", str(home / "s.db"), *args], home, out)


def hosted(model: Path, home: Path, out: Path, *args: str) -> dict:
    """The scenario as rank 0, starting rank 1 from a hostfile (as mlxchat --hosts does)."""
    home.mkdir(parents=True, exist_ok=True)
    hosts = home / "hosts.json"
    hosts.write_text(json.dumps({"hosts": [{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * 2}))
    return lone(model, home, out, "--hosts", str(hosts), "--port", str(free_port(2)), *args)


def ids(run: dict) -> list[list[int]]:
    return [t["ids"] for t in run["turns"]]


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    from mlxchat.models.testing.text import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("llama"))


def test_split_llama_answers_as_one_rank_and_resumes_from_its_rank_segments(llama, tmp_path):
    one = lone(llama, tmp_path / "one", tmp_path / "one.json")
    two = launched(llama, tmp_path / "two", tmp_path / "two.json", "--turns", "3")
    assert ids(two) == ids(one)[:3]
    assert all(t["ids"] for t in two["turns"])
    for before, turn in zip(two["turns"], two["turns"][1:]):  # follow-ups prefill new ids only
        assert turn["source"] == "warm" and turn["miss"] is None
        assert turn["reused"] >= before["prompt"] and \
            turn["prefilled"] == turn["prompt"] - turn["reused"]
    assert [t["prefilled"] for t in two["turns"]] == [t["prefilled"] for t in one["turns"][:3]]
    assert two["weights_bytes"] < 0.75 * one["weights_bytes"]  # each rank holds its shard

    shutil.copytree(tmp_path / "two", tmp_path / "moved")
    snapshots = sorted(p.name for p in (tmp_path / "two" / "data" / "snapshots").iterdir())
    assert len([n for n in snapshots if n.endswith(".ranks.json")]) == 3
    assert len([n for n in snapshots if ".rank1of2." in n]) == 3

    resumed = hosted(llama, tmp_path / "two", tmp_path / "resumed.json",
                     "--session", str(two["session"]), "--skip", "3")
    assert resumed["restored"]["ok"] and resumed["restored"]["reason"] is None
    assert ids(resumed) == ids(one)[3:]
    assert resumed["turns"][0]["source"] == "snapshot"
    assert resumed["turns"][0]["prefilled"] == one["turns"][3]["prefilled"]

    on_one = lone(llama, tmp_path / "moved", tmp_path / "on-one.json",
                  "--session", str(two["session"]), "--skip", "3")
    assert not on_one["restored"]["ok"]
    assert "made on another layout (rank 0 of 2, tensor parallel; running one rank)" \
        in on_one["restored"]["reason"]
    assert ids(on_one) == ids(one)[3:]
    assert on_one["turns"][0]["source"] == "cold"
    assert on_one["turns"][0]["prefilled"] == on_one["turns"][0]["prompt"]


def _family(name: str, folder: Path) -> Path:
    from tests.families.builders import FAMILIES, write_family_model

    return write_family_model(next(f for f in FAMILIES if f.name == name), folder)


def _quantized_llama(folder: Path) -> Path:
    """A tiny llama quantized by mlx-lm (int4, groups of 32: each rank's shard
    of a row still holds whole groups)."""
    from mlx_lm import convert

    from mlxchat.models.testing.text import write_tiny_model

    src = write_tiny_model(folder / "src", hidden_size=128, num_heads=4, num_kv_heads=2,
                           intermediate_size=256)
    convert(str(src), mlx_path=str(folder / "q"), quantize=True, q_group_size=32, q_bits=4)
    return folder / "q"


def _ministral3_three_heads(folder: Path) -> Path:
    """A tiny ministral3 whose 3 heads do not divide over 2 ranks: mlx-lm's
    pipeline parallel (layers split into stages) is chosen instead."""
    from mlxchat.models.testing.text import write_tiny_model

    out = write_tiny_model(folder, hidden_size=48, num_heads=3, num_kv_heads=3,
                           intermediate_size=96)
    config = json.loads((out / "config.json").read_text())
    config.update(model_type="ministral3", rope_parameters={
        "rope_type": "default", "rope_theta": config.get("rope_theta", 10000.0),
        "llama_4_scaling_beta": 0.1, "original_max_position_embeddings": 1024})
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.mark.parametrize("model,turns,mode", [("qwen3", 5, "tensor"),
                                              ("qwen3_moe-r1", 3, "tensor"),
                                              ("llama-int4", 3, "tensor"),
                                              ("ministral3-3-heads", 3, "pipeline")])
def test_split_family_answers_as_one_rank(tmp_path, model, turns, mode):
    """qwen3; a mixture of experts (its experts split over the ranks); a
    quantized model (its packed weights and scales split by whole groups); a
    model whose heads do not divide, split into pipeline stages instead."""
    folder = (_quantized_llama(tmp_path) if model == "llama-int4" else
              _ministral3_three_heads(tmp_path / "m") if model.startswith("ministral3") else
              _family(model, tmp_path / "m"))
    run = ("--max-tokens", "8", "--max-reasoning-tokens", "16", "--turns", str(turns))
    one = lone(folder, tmp_path / "one", tmp_path / "one.json", *run)
    # Rank 0 starts rank 1 itself (2 processes): mlx.launch adds a third whose
    # output threads spin on its ranks' writable stdin (~3 s of CPU a run here);
    # the llama test above runs under mlx.launch.
    two = hosted(folder, tmp_path / "two", tmp_path / "two.json", *run)
    assert ids(two) == ids(one) and len(ids(one)) == turns
    assert [t["prefilled"] for t in two["turns"]] == [t["prefilled"] for t in one["turns"]]
    assert two["weights_bytes"] < 0.7 * one["weights_bytes"]  # each rank holds its shard
    assert two["layout"].startswith(f"2 ranks · {mode} · ")


def test_a_rank_killed_mid_turn_ends_the_turn_on_rank_0(llama, tmp_path):
    run = hosted(llama, tmp_path / "k", tmp_path / "k.json", "--turns", "2", "--max-tokens",
                 "40", "--kill-after", "3", "--rank-timeout", "8")
    first, cut = run["turns"]
    assert first["finish"] in ("stop", "length") and first["warning"] is None
    assert cut["finish"] == "cancelled" and 3 <= len(cut["ids"]) < 40
    assert "the reply was cut short and kept as cancelled" in cut["warning"]
    # Nothing of the cut turn is saved as KV (the ranks' caches are out of step).
    assert cut["snapshot_warning"] is None or cut["snapshot_warning"].startswith(
        "snapshot not saved: a rank ")

    from mlxchat.store import open_store

    store = open_store(tmp_path / "k" / "s.db")
    stored = store.get_session(run["session"]).messages
    assert [m.role for m in stored] == ["user", "assistant"] * 2
    assert stored[-1].content == cut["reply"] and stored[-1].stats.finish_reason == "cancelled"
    assert [r.message_id for r in store.segments.on_branch(stored[-1].id)] == [stored[1].id]
