"""Write a Hugging Face ``tokenizer.json`` for a byte-level BPE vocabulary.

Used by the GGUF import (tokens and merges from the file's metadata) and by
the tiny random models of the tests; mlx-lm then loads the folder as usual.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def write_bpe_tokenizer(
    folder: Path,
    *,
    tokens: Sequence[str],
    merges: Sequence[str],
    special_ids: Sequence[int],
    bos_id: int | None,
    eos_id: int,
    chat_template: str,
    split_digits: bool = False,
    unk_id: int | None = None,
    pad_id: int | None = None,
) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    bpe = models.BPE(vocab=vocab, merges=pairs, unk_token=None, fuse_unk=False,
                     byte_fallback=False, ignore_merges=False)
    tok = Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                          use_regex=True)
    if split_digits:
        # llama.cpp's "smollm" pre-tokenizer: digits one by one, then byte-level.
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r"\d"), behavior="isolated"), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in special_ids])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))

    def name(i: int | None) -> str | None:
        return None if i is None else tokens[i]

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": name(bos_id),
        "eos_token": name(eos_id),
        "unk_token": name(unk_id),
        "pad_token": name(pad_id if pad_id is not None else eos_id),
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1 << 30,
        "chat_template": chat_template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    special = {k: v for k, v in config.items()
               if k in ("bos_token", "eos_token", "unk_token", "pad_token") and v}
    special["additional_special_tokens"] = [tokens[i] for i in special_ids]
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
