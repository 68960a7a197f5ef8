"""The chat template with message text kept as plain text.

Only the template's own structure may produce control tokens. Text the user
types, attaches or imports is tokenized as plain text even when it spells
``<|im_end|>`` or ``[INST]``, so it can never close its turn or open another.

The template is rendered with each message's content replaced by a unique
placeholder. The rendered text is cut at the template's own added tokens
(which become their ids) and at the placeholders; each stretch between two
added tokens, template text and message text together, is encoded with the
added tokens switched off. For text without added tokens this is exactly
what the tokenizer does anyway (it also cuts at added tokens first), so an
ordinary conversation gets the same ids as ``apply_chat_template``.
"""

from __future__ import annotations

import json
import re
import secrets
import weakref
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from mlxchat.engine.prompt.jinja import apply_template, hf_tokenizer

_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"  # private use: no tokenizer's control text


_ADDED: "weakref.WeakKeyDictionary[Any, Mapping[str, int]]" = weakref.WeakKeyDictionary()


def added_tokens(tokenizer: Any) -> Mapping[str, int]:
    """Every added token's text and id: what the tokenizer matches before BPE
    (kept per tokenizer: transformers builds the table anew at each read, a
    render reads it, and Gemma 3 has 6,414 of them)."""
    hf = hf_tokenizer(tokenizer)
    try:
        return _ADDED[hf]
    except (KeyError, TypeError):  # TypeError: one a weak reference cannot hold
        found = MappingProxyType(dict(getattr(hf, "added_tokens_encoder", {}) or {}))
    try:
        _ADDED[hf] = found
    except TypeError:
        pass
    return found


def has_control_text(tokenizer: Any, texts: Sequence[str]) -> bool:
    """Whether any text spells one of the tokenizer's added tokens."""
    pattern = _added_pattern(tuple(added_tokens(tokenizer)))
    return pattern is not None and any(pattern.search(t) for t in texts)


def strings(value: Any) -> list[str]:
    """Every string in ``value`` (messages as dicts, tool definitions): content,
    and the names, arguments (keys too) and ids of tool calls and results."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings(k) + strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in strings(v)]
    return []


def _map_strings(value: Any, change: Any) -> Any:
    """``value`` with ``change`` applied to every string in it (keys too)."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {_map_strings(k, change): _map_strings(v, change) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_map_strings(v, change) for v in value]
    return value


@lru_cache(maxsize=16)
def _added_pattern(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    if not tokens:
        return None
    return re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))


_PREPENDS: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


def _prepends_space(backend: Any) -> bool:
    """SentencePiece-style tokenizers mark the start of a string with '▁' (the
    answer is kept per tokenizer: reading it serializes the whole vocabulary)."""
    if backend not in _PREPENDS:
        spec = json.loads(backend.to_str())
        _PREPENDS[backend] = "Metaspace" in json.dumps(spec.get("pre_tokenizer")) \
            or "Prepend" in json.dumps(spec.get("normalizer"))
    return _PREPENDS[backend]


def encode_plain(tokenizer: Any, text: str, *, at_start: bool = True) -> list[int]:
    """Ids of ``text`` as plain text: no added or special token is matched.

    ``at_start=False`` encodes a stretch from the middle of a prompt (no
    start-of-text '▁' for SentencePiece-style tokenizers)."""
    backend = hf_tokenizer(tokenizer).backend_tokenizer
    if not text:
        return []
    lead = "" if at_start or not _prepends_space(backend) else "\n"
    full = lead + text
    if backend.normalizer is not None:
        full = backend.normalizer.normalize_str(full)
    splits = [full]
    if backend.pre_tokenizer is not None:
        splits = [s for s, _ in backend.pre_tokenizer.pre_tokenize_str(full)]
    ids = [tok.id for s in splits for tok in backend.model.tokenize(s)]
    if lead:
        newline = encode_plain(tokenizer, "\n")
        if ids[:len(newline)] == newline:
            ids = ids[len(newline):]
    return ids


def _render_text(tokenizer: Any, messages: list[dict[str, Any]], generation_prompt: bool,
                 kw: dict[str, Any]) -> str:
    return apply_template(tokenizer, messages, generation_prompt=generation_prompt,
                                  tokenize=False, **kw)


def _spliced_text(tokenizer: Any, messages: list[dict[str, Any]], generation_prompt: bool,
                  kw: dict[str, Any]) -> list[tuple[str, bool]]:
    """The rendered prompt as (text, is_message) pieces, in order."""
    beside = [[_with_text(m, "") for m in messages], kw.get("tools")]
    if has_control_text(tokenizer, strings(beside)):  # in a tool call, result or definition
        return _marked_pieces(tokenizer, messages, generation_prompt, kw)
    nonce = secrets.token_hex(6)
    marks = [f"{_MARK_OPEN}{nonce}.{i}{_MARK_CLOSE}" for i in range(len(messages))]
    shaped = [_with_text(m, mark) for m, mark in zip(messages, marks)]
    rendered = _render_text(tokenizer, shaped, generation_prompt, kw)
    index = {mark: i for i, mark in enumerate(marks)}
    pattern = re.compile(re.escape(_MARK_OPEN) + nonce + r"\.\d+" + re.escape(_MARK_CLOSE))
    pieces: list[tuple[str, bool]] = []
    at = 0
    for found in pattern.finditer(rendered):
        pieces.append((rendered[at:found.start()], False))
        pieces.append((_text_of(messages[index[found.group()]]), True))
        at = found.end()
    pieces.append((rendered[at:], False))
    if "".join(p for p, _ in pieces) != _render_text(tokenizer, messages, generation_prompt, kw):
        # The template reshapes the content (trims it, drops reasoning): render the
        # real text and keep the control tokens of the messages as plain text.
        return _marked_pieces(tokenizer, messages, generation_prompt, kw)
    return pieces


def _with_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    """The message with its text replaced; image parts kept in their place."""
    content = message.get("content")
    if isinstance(content, list):
        return dict(message, content=[dict(p, text=text) if p.get("type") == "text" else p
                                      for p in content])
    return dict(message, content=text)


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if p.get("type") == "text")
    return content


def _marked_pieces(tokenizer: Any, messages: list[dict[str, Any]], generation_prompt: bool,
                   kw: dict[str, Any]) -> list[tuple[str, bool]]:
    """Fallback for templates that transform content, and for control text
    outside content: each added token spelled in a message (or a tool
    definition) is wrapped in private marks before rendering, then kept as text."""
    pattern = _added_pattern(tuple(added_tokens(tokenizer)))
    nonce = secrets.token_hex(6)
    open_, close = f"{_MARK_OPEN}{nonce}", f"{nonce}{_MARK_CLOSE}"
    if pattern is not None:
        def wrap(text: str) -> str:
            return pattern.sub(lambda x: open_ + x.group() + close, text)

        messages = _map_strings(messages, wrap)
        if kw.get("tools"):
            kw = dict(kw, tools=_map_strings(kw["tools"], wrap))
    rendered = _render_text(tokenizer, messages, generation_prompt, kw)
    pieces: list[tuple[str, bool]] = []
    for i, part in enumerate(re.split(re.escape(open_) + "|" + re.escape(close), rendered)):
        pieces.append((part, i % 2 == 1))
    return pieces


def spliced_ids(tokenizer: Any, messages: list[dict[str, Any]], *,
               generation_prompt: bool = True, **template_kwargs: Any) -> list[int]:
    """Token ids of the conversation; message text never becomes a control token."""
    return _ids(tokenizer, _spliced_text(tokenizer, messages, generation_prompt,
                                         template_kwargs))


def open_turn_ids(tokenizer: Any, messages: list[dict[str, Any]],
                  **template_kwargs: Any) -> list[int]:
    """Token ids of the conversation with its last message left open: rendered
    whole and cut right after that message's text, as transformers'
    ``continue_final_message`` does (the text kept as written, plain text).
    ValueError when the template does not write the last message's text."""
    mark = f"{_MARK_OPEN}{secrets.token_hex(6)}{_MARK_CLOSE}"
    pieces = _spliced_text(tokenizer, [*messages[:-1], _with_text(messages[-1], mark)],
                           False, template_kwargs)
    for i, (text, is_message) in enumerate(pieces):
        at = text.find(mark)
        if at >= 0:
            head = [(text[:at], is_message)] if at else []
            return _ids(tokenizer, [*pieces[:i], *head, (_text_of(messages[-1]), True)])
    raise ValueError("the chat template does not write the last message's text")


def _ids(tokenizer: Any, pieces: list[tuple[str, bool]]) -> list[int]:
    """Ids of rendered (text, is_message) pieces: the template's added tokens
    as their ids, everything else (message text always) as plain text."""
    vocab = added_tokens(tokenizer)
    pattern = _added_pattern(tuple(vocab))
    ids: list[int] = []
    stretch: list[str] = []

    def flush() -> None:
        if stretch:
            ids.extend(encode_plain(tokenizer, "".join(stretch), at_start=not ids))
            stretch.clear()

    for text, is_message in pieces:
        if is_message or pattern is None:
            stretch.append(text)
            continue
        at = 0
        for found in pattern.finditer(text):
            stretch.append(text[at:found.start()])
            flush()
            ids.append(vocab[found.group()])
            at = found.end()
        stretch.append(text[at:])
    flush()
    return ids
