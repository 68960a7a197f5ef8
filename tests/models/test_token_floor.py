"""The floor on a text's tokens, computed before tokenizing, is never above
the real count (a refusal from it is never wrong), and is claimed only for
tokenizers that drop nothing; the piecewise count is never above either."""

from __future__ import annotations

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from mlxchat.models.token_floor import least_tokens, longest_token_bytes, tokens_at_least

TEXTS = ["hello", "  padded on both sides  ", "x" * 3000, "日本語のテキスト、絵文字 🙂" * 40,
         "1234567890" * 30, "<|im_end|><|im_start|>system\n" * 5, "\n\n\n\t tabs \t\n" * 50,
         "e\u0301 and \u2126 and \ud55c\uad6d" * 30, "a" * 5 + " " * 400 + "b"]


def _count(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def _check_floor(tokenizer, encode_count, extra=()) -> None:
    longest = longest_token_bytes(tokenizer)
    assert longest > 0
    texts = list(TEXTS) + list(extra)
    for text in texts:
        floor = least_tokens(tokenizer, [text])
        assert floor.tokens <= encode_count(text), (text[:30], floor)
    # Together, wherever they sit in one text.
    joined = "\n".join(texts)
    assert least_tokens(tokenizer, texts).tokens <= encode_count(joined)


def test_the_floor_holds_for_the_bundled_tokenizer(bundled_model):
    tok = bundled_model.tokenizer
    longest = longest_token_bytes(tok)
    assert longest == 81  # its longest entry: a newline and 80 spaces
    vocab = tok._tokenizer.get_vocab()
    worst = max(vocab, key=len)  # the text that packs the most bytes into each token
    _check_floor(tok, lambda t: _count(tok, t), extra=[worst * 50])


def test_the_floor_holds_for_the_tiny_tokenizer(tiny):
    tok = tiny.tokenizer
    _check_floor(tok, lambda t: _count(tok, t))
    floor = least_tokens(tok, ["w" * (15 << 20)])
    assert floor.tokens >= 2048 and floor.text_bytes == 15 << 20  # far past its window


def _sentencepiece_with_byte_fallback() -> Tokenizer:
    vocab = {f"<0x{b:02X}>": b for b in range(256)}
    for piece in ("▁", "t", "h", "e", "a", "n", "d", "x", "▁t", "▁th", "▁the", "▁a", "an",
                  "and", "nd", "▁and", "ex", "ext"):
        vocab.setdefault(piece, len(vocab))
    merges = [("▁", "t"), ("▁t", "h"), ("▁th", "e"), ("▁", "a"), ("a", "n"), ("an", "d"), ("n", "d"),
              ("▁a", "nd"), ("e", "x"), ("ex", "t")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback()])
    return tok


def test_the_floor_holds_for_sentencepiece_with_byte_fallback():
    tok = _sentencepiece_with_byte_fallback()
    _check_floor(tok, lambda t: len(tok.encode(t, add_special_tokens=False).ids),
                 extra=["the and the and " * 100, "\uff21\uff22\uff23" * 100])


@pytest.mark.parametrize("drops", ["whitespace", "removed", "no byte fallback"])
def test_no_floor_is_claimed_for_a_tokenizer_that_may_drop_text(drops):
    vocab = {"[UNK]": 0, "a": 1, "b": 2}
    if drops == "whitespace":
        tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
    elif drops == "removed":
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\s+"), behavior="removed")
    else:
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]", fuse_unk=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
    assert longest_token_bytes(tok) == 0
    assert least_tokens(tok, ["a" * 10_000]).tokens == 0


def test_the_piecewise_count_is_never_above_the_whole_and_stops_at_its_limit(bundled_model):
    tok = bundled_model.tokenizer
    prose = "The river runs past the mill.\nIt turns the wheel, 1234 times.\n" * 2500
    one_line = "word " * 30_000
    for text in (prose, one_line, "z" * 150_000):
        whole = _count(tok, text)
        counted = tokens_at_least(tok, text, limit=10**9)
        assert whole * 0.99 <= counted <= whole
    # Past its limit it stops: a few pieces' worth, not the whole text.
    assert 8192 < tokens_at_least(tok, prose * 80, limit=8192) < 8192 + 40_000
