"""`mlxchat import FILE --hosts hosts.json`: the import runs here and on every
other host at once (127.0.0.1 here, through the same launch script as a
rank); one line per host; a host that fails is named and the exit is 1."""

from __future__ import annotations

import json
import time

from mlxchat.cli import main

from tests.models.gguf_files import random_params, write_model
from tests.models.test_gguf_arch import CONFIGS, metadata


def _gguf(path):
    config = CONFIGS["qwen3"]
    write_model(path, "qwen3", random_params("qwen3", config), config,
                metadata("qwen3", config, **{"general.file_type": 7}), kind="Q8_0")
    return path


def _hosts(tmp_path, *names):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"hosts": [{"ssh": n, "ips": ["127.0.0.1"]} for n in names]}))
    return path


def test_import_on_every_host(tmp_path, capsys):
    gguf = _gguf(tmp_path / "q.gguf")
    code = main(["import", str(gguf), "--name", "tiny-q", "--hosts",
                 str(_hosts(tmp_path, "127.0.0.1", "127.0.0.1"))])
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    assert out[0].startswith(f"rank 0 127.0.0.1: ok imported {gguf} -> ")
    assert out[1].startswith(f"rank 1 127.0.0.1: ok imported {gguf} -> ")
    assert out[0].split(" -> ")[1] == out[1].split(" -> ")[1]  # the same spec on each
    assert out[0].endswith("as 'tiny-q'")


def test_a_host_that_fails_is_named(tmp_path, capsys):
    missing = tmp_path / "gone.gguf"
    code = main(["import", str(missing), "--hosts",
                 str(_hosts(tmp_path, "127.0.0.1", "127.0.0.1"))])
    out = capsys.readouterr().out.splitlines()
    assert code == 1 and len(out) == 2
    for rank, line in enumerate(out):
        assert line == f"rank {rank} 127.0.0.1: FAIL no such GGUF file: {missing}"


def test_a_host_past_its_time_is_ended_there(tmp_path):
    from pathlib import Path

    from mlxchat.cli.import_hosts import import_on_hosts

    gguf = _gguf(tmp_path / "slow.gguf")
    reports = import_on_hosts(str(_hosts(tmp_path, "127.0.0.1", "127.0.0.1")), [str(gguf)],
                              lambda: "here", timeout_s=0.01)
    assert reports[0].ok and reports[0].said == "here"
    assert not reports[1].ok and reports[1].said == "no answer within 0 s", reports[1]

    def running() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    argv = (entry / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if str(gguf).encode() in argv and b"import" in argv:
                    found.append(int(entry.name))
        return found
    # Nothing is left running the import (its launch script's pid was ended).
    for _ in range(40):
        if not running():
            break
        time.sleep(0.05)
    assert running() == []
