"""`mlxchat models --scan` reads a GGUF's header without its vocabulary."""

from __future__ import annotations

import gguf
import pytest

from mlxchat.models import ModelError
from mlxchat.models.gguf import summary as gguf_summary
from mlxchat.models.gguf.header import read_header
from mlxchat.models.scan import inspect

from tests.models.gguf_files import random_params, write_model
from tests.models.test_gguf_arch import CONFIGS, metadata
from tests.models.test_gguf_import import TOKENS


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("summary") / "qwen3.gguf"
    config = CONFIGS["qwen3"]
    write_model(path, "qwen3", random_params("qwen3", config), config,
                metadata("qwen3", config, **{"general.file_type": 7}), kind="Q8_0")
    return path


def test_summary_matches_the_full_reader_but_for_arrays(written):
    full, summary = read_header(written), gguf_summary.read_summary(written)
    assert summary.version == full.version and summary.file_size == full.file_size
    assert [(t.name, t.shape, t.type_name) for t in summary.tensors] == \
        [(t.name, t.shape, t.type_name) for t in full.tensors]
    for key, value in full.metadata.items():
        if isinstance(value, list):
            assert summary.metadata[key] == gguf_summary.SkippedArray(
                summary.metadata[key].item_type, len(value)), key
        else:
            assert summary.metadata[key] == value, key


def test_scan_reads_no_vocabulary_array(written, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the scan built gguf.GGUFReader (it parses every array)")

    decoded: list[str] = []
    string = gguf_summary._Cursor.string
    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    monkeypatch.setattr(gguf_summary._Cursor, "string",
                        lambda self: decoded.append(string(self)) or decoded[-1])
    found = inspect("lmstudio", str(written), written)
    assert found.importable and found.quantization == "Q8_0"
    assert not set(TOKENS[10:]) & set(decoded)  # keys, names, tensor names; no token
    assert len(decoded) < len(TOKENS)


def test_damaged_header_is_one_line(tmp_path):
    path = tmp_path / "cut.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x01" + b"\0" * 7 + b"\x05" + b"\0" * 7)
    with pytest.raises(ModelError, match=r"^truncated or damaged GGUF: .*cut.gguf"):
        gguf_summary.read_summary(path)
