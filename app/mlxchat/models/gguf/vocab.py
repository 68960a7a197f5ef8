"""The tokenizer and chat template of a GGUF model, from its own metadata.

Both vocabularies GGUF stores: byte-level BPE (``tokenizer.ggml.model =
gpt2``, with the pre-tokenizer named by ``tokenizer.ggml.pre``) and
SentencePiece (``llama``: pieces with scores and <0xXX> byte tokens).
"""

from __future__ import annotations

from pathlib import Path

from mlxchat.models.errors import ModelError
from mlxchat.models.gguf.header import GGUFHeader
from mlxchat.models.tokenizer import CHATML_TEMPLATE, write_bpe_tokenizer, write_spm_tokenizer

_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_TAIL = r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_CASED_TAIL = r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def _cased_words(contraction: str) -> str:
    """Words split at a lower-to-upper case change (tekken, o200k)."""
    opener, upper, lower = (r"[^\r\n\p{L}\p{N}]?", r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]",
                            r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]")
    return (f"{opener}{upper}*{lower}+{contraction}"
            f"|{opener}{upper}+{lower}*{contraction}")


# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp), by tokenizer.ggml.pre.
SPLIT_PATTERNS: dict[str, str | None] = {
    "default": None, "gpt2": None, "smollm": None,
    "llama-bpe": _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|" + _TAIL,
    "llama3": _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|" + _TAIL,
    "qwen2": _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|" + _TAIL,
    # Mistral Nemo 2407, Mistral Small 3.x: tokenizer.json's regex, which the model
    # was trained with (llama.cpp's std::regex rewrite splits " ÉCOLE" as " É" "COLE")
    "tekken": _cased_words("") + r"|\p{N}|" + _CASED_TAIL,
    # gpt-oss (o200k): its tokenizer.json's regex likewise, with contractions
    "gpt-4o": _cased_words(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?") + r"|\p{N}{1,3}|" + _CASED_TAIL,
}
PLAIN_TEMPLATE = (
    "{{ bos_token if add_bos else '' }}{% for message in messages %}"
    "{{ message['content'] }}{% if not loop.last %}{{ '\\n\\n' }}{% endif %}{% endfor %}"
)
"""For a base model (no chat template in the file): the messages' text, one after another."""
_GENERATION_PROMPT = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"


def check_vocabulary(header: GGUFHeader) -> None:
    m = header.metadata
    kind = m.get("tokenizer.ggml.model")
    if kind == "gpt2":
        pre = m.get("tokenizer.ggml.pre", "default")
        if pre not in SPLIT_PATTERNS:
            raise ModelError(f"pre-tokenizer '{pre}' is not supported (only "
                             f"{', '.join(SPLIT_PATTERNS)}): {header.path}")
    elif kind == "llama":
        if "tokenizer.ggml.scores" not in m:
            raise ModelError(f"{header.path} has a SentencePiece vocabulary without scores")
    else:
        raise ModelError(f"tokenizer '{kind}' is not supported (only byte-level BPE 'gpt2' "
                         f"and SentencePiece 'llama'): {header.path}")


def chat_template(header: GGUFHeader, override: str | None = None) -> tuple[str, str | None]:
    """(template, notice): the file's template, else a plain one with a notice."""
    template = override or header.metadata.get("tokenizer.chat_template")
    tokens = header.metadata.get("tokenizer.ggml.tokens") or []
    if not template and "<|im_start|>" in tokens and "<|im_end|>" in tokens:
        return CHATML_TEMPLATE, ("the GGUF has no chat template: using ChatML, which its "
                                 "vocabulary's <|im_start|>/<|im_end|> tokens suggest")
    if not template:
        add_bos = bool(header.metadata.get("tokenizer.ggml.add_bos_token", False))
        plain = PLAIN_TEMPLATE.replace("add_bos", "true" if add_bos else "false")
        return plain, ("the GGUF has no chat template (a base model?): using a plain "
                       "template that joins the messages' text")
    if "add_generation_prompt" not in template and "<|im_start|>" in template:
        template += _GENERATION_PROMPT
    return template, None


def write_tokenizer(header: GGUFHeader, folder: Path, template: str) -> None:
    m = header.metadata
    tokens = m["tokenizer.ggml.tokens"]
    types = m.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    # 3 = control, 4 = user-defined: both must match whole, never be split.
    special = [i for i, t in enumerate(types) if t in (3, 4)]
    common = dict(tokens=tokens, special_ids=special,
                  bos_id=m.get("tokenizer.ggml.bos_token_id"),
                  eos_id=int(m["tokenizer.ggml.eos_token_id"]),
                  unk_id=m.get("tokenizer.ggml.unknown_token_id"),
                  pad_id=m.get("tokenizer.ggml.padding_token_id"), chat_template=template)
    if m.get("tokenizer.ggml.model") == "llama":
        write_spm_tokenizer(folder, scores=m["tokenizer.ggml.scores"],
                            add_space_prefix=bool(m.get("tokenizer.ggml.add_space_prefix",
                                                        True)), **common)
        return
    pre = m.get("tokenizer.ggml.pre", "default")
    write_bpe_tokenizer(folder, merges=m.get("tokenizer.ggml.merges", []),
                        split_digits=pre == "smollm", split_pattern=SPLIT_PATTERNS[pre],
                        **common)


SAMPLE_TEXT = "Hello, world! It's 2024: naïve café, 東京, x = a + b;\n\tdone."


def verify_tokenizer(header: GGUFHeader, folder: Path) -> None:
    """Check the written tokenizer against the GGUF's own vocabulary: every token
    string maps back to its id, and sample text survives encode/decode."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokens = header.metadata["tokenizer.ggml.tokens"]
    last = {t: i for i, t in enumerate(tokens)}  # a repeated string: llama.cpp keeps the last
    wrong = [t for t, i in last.items() if tok.token_to_id(t) != i]
    if wrong:
        raise ModelError(f"the tokenizer built from {header.path} does not reproduce its "
                         f"vocabulary ({len(wrong)} tokens differ, e.g. {wrong[0]!r})")
    ids = tok.encode(SAMPLE_TEXT, add_special_tokens=False).ids
    if tok.decode(ids, skip_special_tokens=False) != SAMPLE_TEXT:
        raise ModelError(f"the tokenizer built from {header.path} does not round-trip text "
                         "(missing byte tokens?)")
