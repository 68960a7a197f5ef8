"""Each family's real published chat template (real_templates/, sources in
SOURCES.md) on a tiny random model with that family's control tokens: five
turns where every follow-up prefills only its new message, across a restart
(a new engine and store, the session reopened from disk) and a change of
date (the machine's clock moves on three days) in between. Rendering is
transformers' to the byte, except that the date templates stamp is the
session's."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import time
from pathlib import Path
from typing import Callable

import pytest
from transformers.utils import chat_template_utils

from mlxchat.engine.prompt.jinja import SessionClock, apply_template
from mlxchat.models import load_folder
from mlxchat.models.info import takes_system
from mlxchat.session.ledger import options_for

from .builders import Family, with_template, write_family_model
from .test_conformance import QUESTIONS, ask, new_ids, opener

REAL = Path(__file__).parent / "real_templates"

_DEEPSEEK = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
             "<think>", "</think>")
_PHI = ("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
_PHI4 = ("<|endoftext|>", "<|im_start|>", "<|im_sep|>", "<|im_end|>")
_SMOLLM = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_MISTRAL = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]")

CASES: dict[str, tuple[str, dict]] = {
    # real template: (the family lending architecture and control tokens, changes)
    "llama-3.1": ("llama3", {}),
    "llama-3.2": ("llama3", {}),
    "mistral-nemo": ("mistral", {}),
    # No system prompt: its default one stamps the date (strftime_now at the top level).
    "mistral-small-3.2": ("mistral", {"specials": _MISTRAL, "system": None}),
    "qwen2.5": ("qwen3", {}),
    "qwen3": ("qwen3", {}),
    "qwq": ("qwen3", {}),
    "qwen3-next-instruct": ("qwen3_next", {}),
    "qwen3-next-thinking": ("qwen3_next", {}),
    "deepseek-r1-distill": ("qwen3_moe-r1", {"specials": _DEEPSEEK, "bos": _DEEPSEEK[0],
                                             "eos": (_DEEPSEEK[1],)}),
    "gemma-2": ("gemma3", {}),
    "gemma-3": ("gemma3", {}),
    "gpt-oss": ("gpt_oss", {}),
    "phi-3.5-mini": ("llama3", {"specials": _PHI, "bos": None,
                                "eos": ("<|endoftext|>", "<|end|>")}),
    "phi-4": ("llama3", {"specials": _PHI4, "bos": None, "eos": ("<|im_end|>", "<|endoftext|>")}),
    "phi-4-mini": ("llama3", {"specials": _PHI + ("<|tool|>", "<|/tool|>"), "bos": None,
                              "eos": ("<|endoftext|>", "<|end|>")}),
    "smollm2": ("llama3", {"specials": _SMOLLM, "bos": None,
                           "eos": ("<|im_end|>", "<|endoftext|>")}),
}


def real_family(name: str) -> Family:
    base, changes = CASES[name]
    return with_template(base, (REAL / f"{name}.jinja").read_text(), name=name, **changes)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    fam = real_family(request.param)
    return fam, load_folder(write_family_model(fam, tmp_path_factory.mktemp(fam.name)))


def set_clock(monkeypatch, now: Callable[[], dt.datetime]) -> None:
    """The machine's clock, as mlxchat and transformers' ``strftime_now`` read it."""

    class Clock(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return now()

    monkeypatch.setattr(chat_template_utils, "datetime", Clock)
    monkeypatch.setattr(time, "time", lambda: now().timestamp())


def stamp_formats(source: str) -> set[str]:
    """The formats a template stamps the date in: those it passes to
    ``strftime_now``, and Llama 3's ``date_string`` (mlxchat passes it)."""
    found = set(re.findall(r"strftime_now\(\s*[\"']([^\"']+)[\"']\s*\)", source))
    return found | ({"%d %b %Y"} if "date_string" in source else set())


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_saved_templates_are_the_published_bytes():
    rows = re.findall(r"^\| (\S+\.jinja) \|.*\| ([0-9a-f]{40}) \|$",
                      (REAL / "SOURCES.md").read_text(), re.M)
    assert sorted(f for f, _ in rows) == sorted(p.name for p in REAL.glob("*.jinja"))
    assert sorted(Path(f).stem for f, _ in rows) == sorted(CASES)
    for name, blob in rows:
        assert _git_blob((REAL / name).read_bytes()) == blob, name


def test_five_turns_a_restart_and_a_new_day_stay_exact(case, tmp_path, monkeypatch):
    fam, loaded = case
    db = tmp_path / "s.db"
    conv = opener(loaded, db, fam)().conversation
    replies = 0
    for k, q in enumerate(QUESTIONS):
        if k == 3:  # the app closes; the next morning it reopens the session from disk
            session, created = conv.session.id, conv.session.created
            conv.shutdown()
            set_clock(monkeypatch, lambda: dt.datetime.now() + dt.timedelta(days=3))
            later = chat_template_utils.datetime.now()
            conv = opener(loaded, db, fam, session=str(session))().conversation
            assert conv.session.created == created
        done = ask(conv, q)
        assert done.stats.finish_reason in ("stop", "length"), (k, done.stats)
        replies += bool(done.token_ids)
        if k:  # a follow-up pays only for its own message
            source = "snapshot" if k == 3 else "warm"
            assert (done.stats.cache_source, done.stats.miss_reason) == (source, None), \
                (k, done.stats)
            assert done.stats.prefilled_tokens == new_ids(conv), (k, done.stats)
    assert replies == len(QUESTIONS)  # every turn answered, gpt-oss's first one included

    head = [m for m in conv.messages if m.role == "user"][0]
    opening = loaded.tokenizer.decode(head.token_ids)
    for fmt in stamp_formats(fam.template):
        # The opening keeps the session's date; the day it was reopened on never shows.
        assert dt.datetime.fromtimestamp(created).strftime(fmt) in opening
        assert later.strftime(fmt) not in opening
    # Rendered again on the new day (a new ledger, an edit of the first
    # message), the opening is the one the cache holds.
    again = conv.engine.prompts.message_ids(QUESTIONS[0], system=conv.session.context_system,
                                            previous=None, options=options_for(conv.session))
    assert again == head.token_ids
    conv.shutdown()


def _conversation(tokenizer) -> list[dict[str, str]]:
    turns = [{"role": "user", "content": "Hi there."},
             {"role": "assistant", "content": "Hello! How can I help?"},
             {"role": "user", "content": "Tell me a fact."}]
    system = [{"role": "system", "content": "You are terse."}] if takes_system(tokenizer) else []
    return system + turns


@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False},
                                    {"reasoning_effort": "high"}], ids=["plain", "no-think",
                                                                        "effort"])
def test_renders_as_transformers_does(case, monkeypatch, kwargs):
    """With the session's date equal to today's, every byte is transformers'."""
    fam, loaded = case
    today = dt.datetime(2031, 2, 3, 4, 5, 6)
    set_clock(monkeypatch, lambda: today)
    clock = SessionClock(today.timestamp())
    messages = _conversation(loaded.tokenizer)
    for gen in (True, False):
        for tokenize in (False, True):
            ours = apply_template(loaded.tokenizer, messages, generation_prompt=gen,
                                          tokenize=tokenize, strftime_now=clock, **kwargs)
            theirs = loaded.tokenizer.apply_chat_template(
                messages, add_generation_prompt=gen, tokenize=tokenize, **kwargs)
            assert ours == (list(theirs) if tokenize else theirs), (fam.name, gen, tokenize)
