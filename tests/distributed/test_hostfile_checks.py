"""A hostfile is checked field by field before any rank starts: each bad one
is one line naming the field, for `ask --hosts` and `hosts check` alike, and
nothing is left running or on disk (no launch happened)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from mlxchat.cli.main import main

from tests.distributed.test_hosts_cli import rank_pids

LOCAL = {"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}
NOT_HERE = "192.0.2.1"  # TEST-NET-1: an address no machine of ours has


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    from mlxchat.models.testing.text import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("checked-llama"))


CASES = [
    ({"hosts": [LOCAL, {"ssh": "127.0.0.1", "ips": [5]}]},
     "hosts[1].ips[0]: 5 is not an IP address"),
    ({"hosts": [LOCAL, {"ssh": "127.0.0.1", "ips": ["not an ip"]}]},
     "hosts[1].ips[0]: 'not an ip' is not an IP address"),
    ({"envs": [5], "hosts": [LOCAL, LOCAL]}, 'envs[0]: 5 is not a "KEY=VALUE" string'),
    ({"envs": "A=1", "hosts": [LOCAL, LOCAL]}, 'envs: must be a list of "KEY=VALUE" strings'),
    ({"envs": ["=1"], "hosts": [LOCAL, LOCAL]}, "envs[0]: '' is not an environment variable"),
    ({"hosts": [LOCAL, {"ssh": "127.0.0.1", "ips": [NOT_HERE]}]},
     f"hosts[1].ips[0]: {NOT_HERE} is not an address of this machine, and rank 1"),
    ({"hosts": [{"ssh": "127.0.0.1", "ips": [NOT_HERE]}, LOCAL]},
     f"hosts[0].ips[0]: {NOT_HERE} is not an address of this machine, and rank 0"),
    ({"hosts": [LOCAL, {"ip": "127.0.0.1", "ssh": "127.0.0.1"}]},
     "hosts[1].ip: not a field of a host"),
    ({"hosts": [LOCAL, {"ips": ["127.0.0.1"]}]}, "hosts[1].ssh: must be the host's name"),
    ({"hosts": [LOCAL, {"ssh": "127.0.0.1", "ips": "127.0.0.1"}]},
     "hosts[1].ips: must be a list"),
    ({"backend": 3, "hosts": [LOCAL, LOCAL]}, "backend: must be a name"),
    ({"hosts": "127.0.0.1"}, "hosts: must be a list of hosts"),
]


@pytest.mark.parametrize("command", ["ask", "check"])
def test_each_bad_field_is_one_line_and_nothing_starts(llama, tmp_path, capsys, monkeypatch,
                                                       command):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    for data, said in CASES + [("{not json", "is not valid JSON")]:
        hosts = tmp_path / "hosts.json"
        hosts.write_text(data if isinstance(data, str) else json.dumps(data))
        argv = (["ask", "--model", str(llama), "--hosts", str(hosts), "hi"]
                if command == "ask" else ["hosts", "check", str(hosts), "--model", str(llama)])
        assert main(argv) == 1, said
        err = capsys.readouterr().err
        assert err.startswith(f"mlxchat: error: {hosts}") and said in err, (said, err)
        assert err.count("\n") == 1
        assert rank_pids(llama) == [] and os.listdir(temp) == []
    assert "MLX_RANK" not in os.environ
