"""Tokenizers with other control tokens, built the way the tiny models are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlx_lm.utils import load_tokenizer

from mlxchat.models.testing.text import _byte_chars
from mlxchat.models.tokenizer import write_bpe_tokenizer

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>", "[INST]", "[/INST]", "</s>", "<think>", "</think>"]
# Llama 3's template trims each message (the splice then falls back to marking).
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ message['content'] + '</s>' }}"
    "{% else %}{{ '[INST]' + message['content'] + '[/INST]' }}{% endif %}{% endfor %}")


def write_tokenizer(folder: Path, template: str, *, plain_think: bool = False) -> Path:
    """A byte-level tokenizer whose added tokens are LLAMA3_SPECIALS; with
    ``plain_think`` the <think> pair are added tokens that are not special (as in Qwen3)."""
    tokens = LLAMA3_SPECIALS + _byte_chars()
    write_bpe_tokenizer(folder, tokens=tokens, merges=[],
                        special_ids=list(range(len(LLAMA3_SPECIALS))), bos_id=0, eos_id=3,
                        chat_template=template)
    if plain_think:
        spec = json.loads((folder / "tokenizer.json").read_text())
        for added in spec["added_tokens"]:
            if added["content"] in ("<think>", "</think>"):
                added["special"] = False
        (folder / "tokenizer.json").write_text(json.dumps(spec))
    return folder


@pytest.fixture(scope="session")
def llama3_tokenizer(tmp_path_factory):
    return load_tokenizer(write_tokenizer(tmp_path_factory.mktemp("llama3-tok"), LLAMA3_TEMPLATE,
                                          plain_think=True))


@pytest.fixture(scope="session")
def mistral_tokenizer(tmp_path_factory):
    return load_tokenizer(write_tokenizer(tmp_path_factory.mktemp("mistral-tok"),
                                          MISTRAL_TEMPLATE))


def write_metaspace_tokenizer(folder: Path, template: str) -> Path:
    """Like ``write_tokenizer`` but SentencePiece-style: spaces become '▁' and the
    start of the text gets one (Metaspace, prepend 'first'), as Mistral and Llama 2."""
    write_tokenizer(folder, template)
    spec = json.loads((folder / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["▁"] = len(vocab)
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                             "prepend_scheme": "first", "split": False}
    spec["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                       "split": False}
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    return folder


@pytest.fixture(scope="session")
def metaspace_tokenizer(tmp_path_factory):
    return load_tokenizer(write_metaspace_tokenizer(tmp_path_factory.mktemp("spm-tok"),
                                                    MISTRAL_TEMPLATE))
