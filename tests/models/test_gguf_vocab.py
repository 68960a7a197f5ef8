"""Tokenizers built from a GGUF's vocabulary, checked against llama.cpp's algorithms
re-implemented here: the pre-tokenizer regexes of Llama 3 and Qwen 2, and the
SentencePiece merge-by-score of Llama 2 / Mistral / Gemma vocabularies."""

from __future__ import annotations

import json

import pytest
import regex
from tokenizers import Tokenizer

from mlxchat.models import ModelError, import_gguf, load_model
from mlxchat.models.testing.text import _byte_chars

from tests.models.gguf_files import random_params, write_model
from tests.models.test_gguf_arch import BASE, metadata
from tests.models.test_gguf_import import MERGES, TOKEN_TYPES, TOKENS

# llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_LLAMA3 and _QWEN2
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
         r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Mistral's tokenizer.json (tekken), as written there. llama.cpp rewrites its case
# classes as ((?=[\p{L}])([^a-z])) for std::regex, which splits non-ASCII capitals
# apart (" ÉCOLE" -> " É", "COLE"); the model was trained on this form.
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# gpt-oss's tokenizer.json (o200k, llama.cpp's "gpt-4o"), as written there.
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
         r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SAMPLES = ["Hello world 1234567 it's", "IT'S   spaced\n\n  lines\t!", "café €12,345.67 Zürich",
           "x=a+b;// 42ms", "日本語のテキスト 2024年", "HTTPServer camelCaseWord ÉCOLE a/b\n/c"]
CONFIG = {**BASE, "model_type": "llama", "rope_theta": 10000.0}


def gguf_with_vocab(tmp_path, name: str, **tokenizer_meta):
    config = {**CONFIG, "vocab_size": len(tokenizer_meta.get("tokenizer.ggml.tokens", TOKENS))}
    params = random_params("llama", config, seed=4)
    path = tmp_path / f"{name}.gguf"
    write_model(path, "llama", params, config, metadata("llama", config, **tokenizer_meta))
    return path


@pytest.mark.parametrize("pre, pattern", [("llama-bpe", LLAMA3), ("qwen2", QWEN2),
                                          ("tekken", TEKKEN), ("gpt-4o", O200K)])
def test_bpe_pre_tokenizer_splits_like_llama_cpp(tmp_path, pre, pattern):
    folder = import_gguf(gguf_with_vocab(tmp_path, pre, **{"tokenizer.ggml.pre": pre}))
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    chars = _byte_chars()
    for text in SAMPLES:
        ours = [piece for piece, _ in tok.pre_tokenizer.pre_tokenize_str(text)]
        theirs = ["".join(chars[b] for b in m.group().encode())
                  for m in regex.finditer(pattern, text)]
        assert ours == theirs, text
    digits = [piece for piece, _ in tok.pre_tokenizer.pre_tokenize_str("1234567")]
    assert digits == (["123", "456", "7"] if pre in ("llama-bpe", "gpt-4o")
                      else list("1234567"))
    # the vocabulary round-trips: every token string to its id, text through ids
    assert all(tok.token_to_id(t) == i for i, t in enumerate(TOKENS))
    for text in SAMPLES:
        assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text


def test_unknown_pre_tokenizer_is_refused(tmp_path):
    path = gguf_with_vocab(tmp_path, "odd", **{"tokenizer.ggml.pre": "made-up"})
    with pytest.raises(ModelError) as info:
        load_model(str(path))
    assert str(info.value).startswith("pre-tokenizer 'made-up' is not supported")


def spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """<unk> <s> </s>, the 256 byte tokens, then pieces with descending scores."""
    pieces = ["▁", "t", "h", "e", "▁t", "he", "▁the", "a", "c", "f", "▁c", "af", "▁caf",
              "é", "r", "o", "ro", "▁ro", "d", "▁rod", "s", "▁s", "n", "ne", "on", "▁on", "▁o"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    return tokens, scores, types


def spm_reference(text: str, tokens: list[str], scores: list[float]) -> list[int]:
    """llama.cpp's llm_tokenizer_spm: merge the best-scoring adjacent pair until none
    is in the vocabulary; leftover pieces fall back to their UTF-8 byte tokens."""
    vocab = {t: i for i, t in enumerate(tokens)}
    symbols = list(("▁" + text).replace(" ", "▁"))
    while True:
        best = None
        for i in range(len(symbols) - 1):
            joined = symbols[i] + symbols[i + 1]
            if joined in vocab and (best is None or scores[vocab[joined]] > best[0]):
                best = (scores[vocab[joined]], i)
        if best is None:
            break
        i = best[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    ids = []
    for s in symbols:
        ids += [vocab[s]] if s in vocab else [vocab[f"<0x{b:02X}>"] for b in s.encode()]
    return ids


def test_sentencepiece_vocabulary_matches_llama_cpp(tmp_path):
    tokens, scores, types = spm_vocab()
    path = gguf_with_vocab(tmp_path, "spm", **{
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores, "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": [], "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2})
    tok = load_model(str(path)).tokenizer
    for text in ["the cafe", "the café rods on", "she ran", "x 9 ü!", "  two  spaces"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == spm_reference(text, tokens, scores), text
        assert tok.decode(ids) == text
    assert tokens[tok.encode("the", add_special_tokens=False)[0]] == "▁the"
    assert [tokens[i] for i in tok.encode("ü", add_special_tokens=False)] == [
        "▁", "<0xC3>", "<0xBC>"]  # byte fallback


def test_base_model_gets_a_plain_template_and_a_notice(tmp_path):
    specials = ["<|endoftext|>", "<s>", "</s>"]  # no ChatML tokens: nothing to guess from
    tokens = specials + TOKENS[3:]
    path = gguf_with_vocab(tmp_path, "base", **{"tokenizer.ggml.tokens": tokens,
                                                "tokenizer.ggml.token_type": TOKEN_TYPES,
                                                "tokenizer.ggml.merges": MERGES})
    folder = import_gguf(path)
    notes = json.loads((folder / "mlxchat-import.json").read_text())["notes"]
    assert any("no chat template" in n for n in notes)
    tok = load_model(str(path)).tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": "Once upon"},
                                    {"role": "assistant", "content": "a time"}],
                                   add_generation_prompt=True, tokenize=False)
    assert text == "Once upon\n\na time"


def test_a_vocabulary_without_byte_tokens_is_refused(tmp_path, mlxchat_home):
    """Byte-level BPE needs all 256 byte symbols; without 'é''s bytes text would be lost."""
    chars = _byte_chars()
    missing = {chars[b] for b in "é".encode()}
    tokens = [t for t in TOKENS if t not in missing]
    types = [3] * 3 + [1] * (len(tokens) - 3)
    path = gguf_with_vocab(tmp_path, "holes", **{"tokenizer.ggml.tokens": tokens,
                                                 "tokenizer.ggml.token_type": types})
    models = mlxchat_home / "cache" / "models"
    before = set(models.iterdir()) if models.exists() else set()
    with pytest.raises(ModelError) as info:
        import_gguf(path)
    assert str(info.value) == (f"the tokenizer built from {path} does not round-trip text "
                               "(missing byte tokens?)")
    assert {p.name for p in set(models.iterdir()) - before} <= {"hashes.json"}  # nothing kept
