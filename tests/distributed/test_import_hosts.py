"""`mlxchat import FILE --hosts hosts.json`: the import runs here and on every
other host at once (127.0.0.1 here, through the same launch script as a
rank); one line per host; a host that fails is named and the exit is 1."""

from __future__ import annotations

import json

from mlxchat.cli.main import main
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
