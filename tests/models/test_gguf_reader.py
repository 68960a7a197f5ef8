"""The GGUF header reader reads arrays whole (a large vocabulary parses in a
second, not tens of them) and gives exactly what gguf-py's own reader gives;
an array cut short or a crafted length is one line, never a hang."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

from mlxchat.models import ModelError
from mlxchat.models.gguf.header import _value, read_header

from tests.models.gguf_writer import write_gguf

TOKENS = ["<s>", "</s>", "a", "b", "ab", "é", "日本", ""] * 40


def write(path, **extra):
    meta = {"general.architecture": "llama", "tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": TOKENS, "tokenizer.ggml.token_type": [1] * len(TOKENS),
            "general.tags": [], **extra}
    write_gguf(path, meta, [("token_embd.weight", np.ones((4, 32), np.float32), "F32")])
    return path


def test_arrays_read_whole_give_what_gguf_py_gives(tmp_path):
    path = write(tmp_path / "m.gguf", **{"llama.list": [-3, 7, 2 ** 20]})
    ours = read_header(path)
    theirs = gguf.GGUFReader(path)
    expected = {k: _value(f) for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    assert ours.metadata == expected
    assert ours.metadata["tokenizer.ggml.tokens"] == TOKENS
    assert ours.metadata["llama.list"] == [-3, 7, 2 ** 20] and ours.metadata["general.tags"] == []
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    assert np.array_equal(np.asarray(ours.tensors[0].data), np.asarray(theirs.tensors[0].data))


def _offset_of(data: bytes, key: str) -> int:
    """Where the value of metadata ``key`` starts (after its type)."""
    raw = key.encode()
    return data.index(struct.pack("<Q", len(raw)) + raw) + 8 + len(raw) + 4


@pytest.mark.parametrize("damage", ["cut inside the vocabulary", "a string of 2^62 bytes",
                                    "an array of 2^60 strings", "an array of 2^60 numbers"])
def test_a_damaged_array_is_one_line(tmp_path, damage):
    data = bytearray(write(tmp_path / "m.gguf").read_bytes())
    tokens = _offset_of(data, "tokenizer.ggml.tokens")
    if damage == "cut inside the vocabulary":
        data = data[:tokens + 12 + 200]
    elif damage == "a string of 2^62 bytes":
        data[tokens + 12:tokens + 20] = struct.pack("<Q", 2 ** 62)
    elif damage == "an array of 2^60 strings":
        data[tokens + 4:tokens + 12] = struct.pack("<Q", 2 ** 60)
    else:
        types = _offset_of(data, "tokenizer.ggml.token_type")
        data[types + 4:types + 12] = struct.pack("<Q", 2 ** 60)
    cut = tmp_path / "bad.gguf"
    cut.write_bytes(bytes(data))
    with pytest.raises(ModelError) as caught:
        read_header(cut)
    message = str(caught.value)
    assert "\n" not in message and (message.startswith(f"truncated or damaged GGUF: {cut} ")
                                    or message.startswith(f"truncated GGUF: {cut}"))
