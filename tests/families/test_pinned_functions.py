"""The session's date reaches ``strftime_now`` wherever a template calls it:
at the top level, in a macro, a macro called by a macro, a call block, a
default argument, a captured block; in any format; also when a message spells
a control token (the template is then rendered around the messages)."""

from __future__ import annotations

import datetime as dt

import pytest

from mlxchat.chat import Message
from mlxchat.engine.prompt import jinja
from mlxchat.engine.prompt.delta import TemplateOptions
from mlxchat.engine.prompt.jinja import apply_template
from mlxchat.engine.prompt.render import render
from mlxchat.models import load_folder

from .builders import FAMILIES, write_family_model

CALLS = {
    "top level": "{{ strftime_now(fmt) }}",
    "macro": "{% macro d() %}{{ strftime_now(fmt) }}{% endmacro %}{{ d() }}",
    "nested macro": "{% macro inner() %}{{ strftime_now(fmt) }}{% endmacro %}"
                    "{% macro outer() %}{{ inner() }}{% endmacro %}{{ outer() }}",
    "call block": "{% macro wrap() %}{{ caller() }}{% endmacro %}"
                  "{% call wrap() %}{{ strftime_now(fmt) }}{% endcall %}",
    "default argument": "{% macro d(now=strftime_now) %}{{ now(fmt) }}{% endmacro %}{{ d() }}",
    "captured block": "{% set s %}{% if strftime_now is defined %}{{ strftime_now(fmt) }}"
                      "{% endif %}{% endset %}{{ s }}",
}
FORMATS = ("%Y-%m-%d", "%d %b %Y", "%A %B %d, %H:%M")
STARTED = dt.datetime(2019, 4, 5, 6, 7).timestamp()


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    fam = next(f for f in FAMILIES if f.name == "gpt_oss")
    return load_folder(write_family_model(fam, tmp_path_factory.mktemp("oss")))


def _as(loaded, monkeypatch, body: str, fmt: str):
    """The tokenizer with a template that prints its message, then ``body``."""
    source = "{% set fmt = '" + fmt + "' %}{{ messages[0].content }}|" + body
    monkeypatch.setattr(jinja.hf_tokenizer(loaded.tokenizer), "chat_template",
                        source)
    return loaded.tokenizer


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("where", sorted(CALLS))
def test_the_date_is_the_sessions_wherever_the_template_asks(gpt_oss, monkeypatch, where, fmt):
    tok = _as(gpt_oss, monkeypatch, CALLS[where], fmt)
    options = TemplateOptions(date=STARTED)
    stamp = dt.datetime.fromtimestamp(STARTED).strftime(fmt)
    assert stamp != dt.datetime.now().strftime(fmt)
    text = apply_template(tok, [{"role": "user", "content": "hi"}],
                                  generation_prompt=True, tokenize=False, **options.kwargs())
    assert text == "hi|" + stamp
    # A message spelling a control token: rendered around the message, same date.
    ids = render(tok, [Message("user", "<|end|>")], **options.kwargs())
    assert tok.decode(ids) == "<|end|>|" + stamp
    assert "<|end|>" not in tok.convert_ids_to_tokens(ids)  # it stayed text


def test_without_a_session_date_the_template_reads_the_clock(gpt_oss, monkeypatch):
    tok = _as(gpt_oss, monkeypatch, CALLS["nested macro"], "%Y")
    ids = render(tok, [Message("user", "hi")])
    assert tok.decode(ids) == "hi|" + dt.datetime.now().strftime("%Y")
