"""Write a Hugging Face ``tokenizer.json`` for a byte-level BPE vocabulary.

Used by the GGUF import (tokens and merges from the file's metadata) and by
the tiny random models of the tests; mlx-lm then loads the folder as usual.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
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
    split_pattern: str | None = None,
) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json.

    ``split_pattern`` replaces GPT-2's regex for the pre-tokenizer split
    (Llama 3, Qwen 2); ``split_digits`` is SmolLM's digits-one-by-one rule.
    """
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    bpe = models.BPE(vocab=vocab, merges=pairs, unk_token=None, fuse_unk=False,
                     byte_fallback=False, ignore_merges=False)
    tok = Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                          use_regex=split_pattern is None)
    steps = []
    if split_pattern is not None:
        steps.append(pre_tokenizers.Split(Regex(split_pattern), behavior="isolated"))
    if split_digits:
        # llama.cpp's "smollm" pre-tokenizer: digits one by one, then byte-level.
        steps.append(pre_tokenizers.Split(Regex(r"\d"), behavior="isolated"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps + [byte_level]) if steps else byte_level
    tok.decoder = decoders.ByteLevel()
    _save(tok, folder, tokens, special_ids)

    _write_configs(folder, tokens, special_ids, bos_id=bos_id, eos_id=eos_id, unk_id=unk_id,
                   pad_id=pad_id, chat_template=chat_template)


def _save(tok: Tokenizer, folder: Path, tokens: Sequence[str], special_ids: Sequence[int]) -> None:
    from tokenizers import AddedToken

    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in special_ids])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))


def _write_configs(folder: Path, tokens: Sequence[str], special_ids: Sequence[int], *,
                   bos_id: int | None, eos_id: int, unk_id: int | None, pad_id: int | None,
                   chat_template: str) -> None:
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


def spm_merges(tokens: Sequence[str], scores: Sequence[float]) -> list[tuple[str, str]]:
    """BPE merges equivalent to a SentencePiece BPE vocabulary with scores.

    SentencePiece (and llama.cpp's SPM tokenizer) repeatedly joins the adjacent
    pair whose joined piece is in the vocabulary with the highest score; a BPE
    merge list ranked by that score does the same.
    """
    vocab = {t: i for i, t in enumerate(tokens)}
    ranks: list[float] = []
    lefts: list[int] = []
    rights: list[int] = []
    for piece, score in zip(tokens, scores):
        for cut in range(1, len(piece)):
            left = vocab.get(piece[:cut])
            if left is None:
                continue
            right = vocab.get(piece[cut:])
            if right is not None:
                ranks.append(-score)
                lefts.append(left)
                rights.append(right)
    # Highest score first, ties by the halves' ids (numpy's sort: 0.5M merges of
    # Gemma's vocabulary in a fraction of what sorting tuples of strings takes).
    order = np.lexsort((np.array(rights, np.int64), np.array(lefts, np.int64),
                        np.array(ranks, np.float64)))
    return [(tokens[lefts[k]], tokens[rights[k]]) for k in order.tolist()]


def write_spm_tokenizer(
    folder: Path,
    *,
    tokens: Sequence[str],
    scores: Sequence[float],
    special_ids: Sequence[int],
    bos_id: int | None,
    eos_id: int,
    chat_template: str,
    unk_id: int | None = None,
    pad_id: int | None = None,
    add_space_prefix: bool = True,
) -> None:
    """A SentencePiece BPE vocabulary (Llama 2, Mistral, Gemma) with byte fallback:
    spaces become '▁', unknown characters their <0xXX> byte tokens."""
    from tokenizers import normalizers

    vocab = {tok: i for i, tok in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=spm_merges(tokens, scores),
                     unk_token=None if unk_id is None else tokens[unk_id],
                     fuse_unk=True, byte_fallback=True, ignore_merges=False)
    tok = Tokenizer(bpe)
    steps = [normalizers.Replace(" ", "▁")]
    if add_space_prefix:
        steps.insert(0, normalizers.Prepend("▁"))
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = None
    parts = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_space_prefix:
        parts.append(decoders.Strip(" ", 1, 0))
    tok.decoder = decoders.Sequence(parts)
    _save(tok, folder, tokens, special_ids)
    _write_configs(folder, tokens, special_ids, bos_id=bos_id, eos_id=eos_id, unk_id=unk_id,
                   pad_id=pad_id, chat_template=chat_template)
