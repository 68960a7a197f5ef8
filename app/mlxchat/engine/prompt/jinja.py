"""The chat template rendered as transformers renders it, with the functions a
session pins (the date) in reach of every part of the template.

transformers passes each render argument through ``_plain_template_data``,
which turns anything that is not JSON data into a placeholder string: a
``strftime_now`` given as an argument arrives as ``"<builtin_function_or_method>"``
and shadows the template's global, so ``strftime_now("%Y-%m-%d")`` fails
(gpt-oss, Mistral Small 3.2) wherever it is called. Functions are pinned instead as
globals of an overlay of transformers' own environment for that template:
the same sandbox, extensions, filters and globals, so every other byte of the
render is transformers'.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import jinja2
from transformers import PreTrainedTokenizerBase

try:  # transformers' own compiler: its environment is the one to match
    from transformers.utils.chat_template_utils import _compile_jinja_template
except ImportError:  # pragma: no cover - another transformers: templates read the clock
    _compile_jinja_template = None


def hf_tokenizer(tokenizer: Any) -> Any:
    """The Hugging Face tokenizer inside mlx-lm's TokenizerWrapper (or itself)."""
    return getattr(tokenizer, "_tokenizer", tokenizer)


@dataclass(frozen=True)
class SessionClock:
    """``strftime_now`` for templates: the session's start, never the wall
    clock, so a template's date stamp renders the same on every day."""

    when: float

    def __call__(self, format: str) -> str:  # noqa: A002 - the template's name for it
        return dt.datetime.fromtimestamp(self.when).strftime(format)


def _jinja_source(tokenizer: Any) -> str | None:
    """The template transformers renders for this tokenizer, or None when a
    Python renderer stands in for it (mlx-lm's chat_template_type, a tokenizer
    class with its own apply_chat_template)."""
    if getattr(tokenizer, "_chat_template", None) is not None:
        return None
    hf = hf_tokenizer(tokenizer)
    if type(hf).apply_chat_template is not PreTrainedTokenizerBase.apply_chat_template:
        return None
    try:
        return hf.get_chat_template()
    except ValueError:  # no template: let apply_chat_template say so
        return None


@lru_cache(maxsize=16)
def _code(source: str) -> Any:
    """The template compiled once (the costly part): each session's pins
    (its clock) only bind it anew."""
    return _compile_jinja_template(source).environment.compile(source)


@lru_cache(maxsize=16)
def _compiled(source: str, pinned: tuple[tuple[str, Any], ...]) -> jinja2.Template:
    base = _compile_jinja_template(source).environment
    env = base.overlay()
    env.globals = {**base.globals, **dict(pinned)}  # the overlay shares base's dict
    return env.template_class.from_code(env, _code(source), env.make_globals(None), None)


def _split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
    data = {k: v for k, v in kwargs.items() if not callable(v)}
    pinned = tuple(sorted((k, v) for k, v in kwargs.items() if callable(v)))
    return data, pinned


def apply_template(tokenizer: Any, messages: Sequence[dict[str, Any]], *, generation_prompt: bool,
           tokenize: bool, **kwargs: Any) -> Any:
    """``tokenizer.apply_chat_template(messages, ...)`` (text, or ids when
    ``tokenize``) with the callables among ``kwargs`` as template globals."""
    data, pinned = _split(kwargs)
    source = _jinja_source(tokenizer) if pinned and _compile_jinja_template else None
    if source is None:  # nothing to pin, or no Jinja template to pin it in
        out = tokenizer.apply_chat_template(list(messages), add_generation_prompt=generation_prompt,
                                            tokenize=tokenize, **data)
        return list(out) if tokenize else out
    hf = hf_tokenizer(tokenizer)
    if tokenizer is not hf and hasattr(tokenizer, "has_thinking"):
        data.setdefault("enable_thinking", tokenizer.has_thinking)  # as mlx-lm's wrapper does
    text = _compiled(source, pinned).render(
        messages=[dict(m) for m in messages], tools=data.pop("tools", None), documents=None,
        add_generation_prompt=generation_prompt, **{**hf.special_tokens_map, **data})
    return hf.encode(text, add_special_tokens=False) if tokenize else text
