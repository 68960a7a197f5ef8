"""A spent reasoning budget closes the reasoning as the family writes it and
the model answers after it (as llama.cpp's reasoning budget does): the
think-end tag for R1 distills and Qwen3, gpt-oss's end of the analysis
message and head of the final one. The closing tokens are the reply's ids,
so the next turn reuses the whole cache. Random weights rarely close their
reasoning themselves, which is the case here: the templates' generation
prompts open the reasoning."""

from __future__ import annotations

import pytest

from mlxchat.config import Settings
from mlxchat.engine.turn import reasoning
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder
from mlxchat.models.markup import FINAL, markup_of
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store

from . import templates
from .builders import with_template, write_family_model
from .test_conformance import ask, new_ids
from .test_real_templates import real_family

BUDGET = 8
# gpt-oss's template with a generation prompt that opens the analysis channel.
OSS_ANALYSIS = templates.GPT_OSS.replace(
    "{{- '<|start|>assistant' }}", "{{- '<|start|>assistant<|channel|>analysis<|message|>' }}")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    made: dict[str, object] = {}

    def get(name: str, seed: int = 0):
        key = f"{name}-{seed}"
        if key not in made:
            fam = (real_family(name) if name == "deepseek-r1-distill"
                   else with_template("gpt_oss", OSS_ANALYSIS, name="oss-analysis"))
            made[key] = load_folder(write_family_model(fam, tmp_path_factory.mktemp(key),
                                                       seed=seed))
        return made[key]
    return get


def open_conv(loaded, tmp_path, *, load=None, **generation):
    gen = GenerationSettings(temperature=0.0, max_reasoning_tokens=BUDGET, **generation)
    return open_conversation(Settings(model="tiny", generation=gen),
                             store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=load or (lambda spec, progress=None: loaded)).conversation


def closing_of(tok) -> list[int]:
    markup = markup_of(tok)
    if markup.kind == "think":
        return list(markup.end)
    return list(tok.encode("<|end|>" + FINAL, add_special_tokens=False))


def check_closed(conv, done) -> None:
    """Reasoning sampled to the budget, then the closing tokens, then an answer."""
    tok = conv.engine.loaded.tokenizer
    stats, ids, closing = done.stats, done.token_ids, closing_of(tok)
    assert stats.reasoning_budget_closed
    assert ids[BUDGET:BUDGET + len(closing)] == closing
    assert stats.reasoning_tokens == BUDGET + len(closing)
    sampled = ids[BUDGET + len(closing):]
    assert stats.answer_tokens == len(sampled) > 0
    assert stats.generated_tokens == len(ids)
    if stats.finish_reason == "length":  # the answer's own budget, never the reasoning's
        assert len(sampled) == conv.generation.max_tokens
    else:
        assert stats.finish_reason == "stop" and sampled[-1] in tok.eos_token_ids
    body = ids[:-1] if stats.finish_reason == "stop" else ids
    expect = reasoning.split_reply(tok, conv.messages[-2].token_ids or [], body)
    assert (done.reasoning, done.reply) == (expect.reasoning, expect.answer)


@pytest.mark.parametrize("name", ["deepseek-r1-distill", "oss-analysis"])
def test_a_spent_budget_closes_the_reasoning_and_the_model_answers(models, name, tmp_path):
    loaded = models(name)
    conv = open_conv(loaded, tmp_path, max_tokens=6)
    first = ask(conv, "Why is the sky blue?")
    check_closed(conv, first)
    view = conv.engine.live_view()
    assert list(view.tokens) == conv.messages[0].token_ids + first.token_ids
    assert view.length == len(view.tokens)  # the arrays hold every token, the forced ones too
    # The follow-up reuses the whole cache: it prefills exactly its own ids.
    second = ask(conv, "And at sunset?")
    assert second.stats.prefilled_tokens == new_ids(conv), second.stats
    assert second.stats.reused_tokens == len(conv.messages[0].token_ids) + len(first.token_ids)
    stored = conv.reload().messages
    assert stored[1].stats.reasoning_budget_closed and stored[1].token_ids == first.token_ids
    conv.shutdown()


def test_what_closes_the_reasoning_depends_on_where_gpt_oss_is(models):
    """In the analysis message: its end, then the final channel's head; just
    after its end: the head alone; in a header: nothing yet (it may open the
    final channel itself); in the answer: nothing to close."""
    tok = models("oss-analysis").tokenizer
    markup = markup_of(tok)
    enc = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    prompt = enc("<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>analysis"
                 "<|message|>")
    split = reasoning.Splitter.for_prompt(tok, prompt)
    assert split.part == "reasoning"  # the prompt opened the analysis message
    for t in enc("Let me think"):
        split.feed(t)
    assert split.closing() == (markup.turn_end, *markup.final)
    split.feed(markup.turn_end)
    assert split.closing() == markup.final
    split.feed(markup.turn_start)
    assert split.closing() is None
    assert split.force(enc("assistant<|channel|>final<|message|>")) == []
    assert split.part == "answer" and split.closing() == ()
    assert split.answer_tokens == 0  # forced markup counts as reasoning
    shown = [pair for t in enc("Hi") for pair in split.feed(t)]
    assert tok.decode([t for t, _ in shown]) == "Hi" and split.answer_tokens == 2


@pytest.mark.parametrize("mode", ["lookup", "draft"])
def test_the_close_under_speculation_keeps_the_cache_exact(models, tmp_path, mode):
    """The stream is closed and opened again after the closing tokens; a
    draft model's cache catches up with them."""
    loaded, draft = models("deepseek-r1-distill"), models("deepseek-r1-distill", seed=1)
    conv = open_conv(loaded, tmp_path, max_tokens=6, speculative=mode, draft_tokens=3,
                     load=lambda spec, progress=None: draft if spec == "tiny-draft" else loaded)
    if mode == "draft":
        conv.speculation.set_draft("tiny-draft")
    first = ask(conv, "Why is the sky blue?")
    assert first.stats.spec_mode == mode
    check_closed(conv, first)
    cached = conv.messages[0].token_ids + first.token_ids
    view = conv.engine.live_view()
    assert list(view.tokens) == cached and view.length == len(cached)
    if mode == "draft":
        draft = conv.engine.draft_cached_tokens
        assert draft == cached[:len(draft)] and len(draft) >= len(cached) - 2
    second = ask(conv, "And at sunset?")
    assert second.stats.prefilled_tokens == new_ids(conv), second.stats
    conv.shutdown()


def test_the_close_is_said_in_the_stats_line_and_in_stats(models, tmp_path):
    from dataclasses import replace

    from mlxchat.tui.formatting import REASONING_CLOSED, transcript_stats_line

    from .test_reasoning import run

    conv = open_conv(models("deepseek-r1-distill"), tmp_path, max_tokens=2)
    stats = ask(conv, "Why?").stats
    assert stats.reasoning_budget_closed
    assert REASONING_CLOSED in transcript_stats_line(stats)
    assert REASONING_CLOSED not in transcript_stats_line(replace(stats,
                                                                 reasoning_budget_closed=False))
    rows = dict(run(conv, "/stats").rows)
    assert rows["reasoning"].endswith("; closed at max_reasoning_tokens, then answered")
    conv.shutdown()
