"""Reasoning as its own part of a reply: labelled from the tokenizer's think
tags or gpt-oss channels, streamed and stored apart from the answer, while
the ledger keeps the reply's ids exactly as sampled."""

from __future__ import annotations

import pytest

from mlxchat.config import Settings
from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.engine.prompt.delta import TemplateOptions
from mlxchat.engine.turn import reasoning
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder
from mlxchat.models.markup import Markup, markup_of
from mlxchat.session.conversation import Conversation
from mlxchat.session.ledger import key_for, options_for
from mlxchat.session.root import open_conversation
from mlxchat.store import open_store

from .builders import FAMILIES, write_family_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    made: dict[str, object] = {}

    def get(name: str):
        if name not in made:
            fam = next(f for f in FAMILIES if f.name == name)
            made[name] = load_folder(write_family_model(fam, tmp_path_factory.mktemp(name)))
        return made[name]
    return get


def encode(tok, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def labelled(tok, prompt: list[int], ids: list[int], markup=None):
    split = reasoning.Splitter.for_prompt(tok, prompt, markup)
    out = [pair for t in ids for pair in split.feed(t)] + split.flush()
    return out, split


def test_think_tags_split_reasoning_from_the_answer(model):
    tok = model("qwen3").tokenizer
    assert markup_of(tok).kind == "think"
    thought, answer = "plan the reply", "Here it is."
    ids = encode(tok, f"<think>\n{thought}\n</think>\n\n{answer}")
    shown, split = labelled(tok, encode(tok, "<|im_start|>assistant\n"), ids)
    assert tok.decode([t for t, p in shown if p == "reasoning"]).strip() == thought
    assert tok.decode([t for t, p in shown if p == "answer"]).strip() == answer
    # Every id is counted once; the markers are reasoning's and never shown.
    assert split.reasoning_tokens + split.answer_tokens == len(ids)
    assert split.reasoning_tokens == len(encode(tok, f"<think>\n{thought}\n</think>"))
    whole = reasoning.split_reply(tok, [], ids)
    assert (whole.reasoning, whole.answer) == (thought, answer)


def test_a_prompt_that_opens_a_think_block_starts_in_reasoning(model):
    tok = model("qwen3_moe-r1").tokenizer
    prompt = list(tok.apply_chat_template([{"role": "user", "content": "hi"}],
                                          add_generation_prompt=True))
    markup = markup_of(tok)
    assert reasoning.starts_in_reasoning(markup, prompt)
    ids = encode(tok, "still thinking</think>done")
    result = reasoning.split_reply(tok, prompt, ids)
    assert (result.reasoning, result.answer) == ("still thinking", "done")
    # Qwen3 with thinking off: the prompt's think block is already closed.
    qwen = model("qwen3").tokenizer
    closed = list(qwen.apply_chat_template([{"role": "user", "content": "hi"}],
                                           add_generation_prompt=True, enable_thinking=False))
    assert not reasoning.starts_in_reasoning(markup_of(qwen), closed)


def test_harmony_channels(model):
    tok = model("gpt_oss").tokenizer
    assert markup_of(tok).kind == "harmony"
    prompt = list(tok.apply_chat_template([{"role": "user", "content": "hi"}],
                                          add_generation_prompt=True))
    reply = ("<|channel|>analysis<|message|>User says hi.<|end|>"
             "<|start|>assistant<|channel|>final<|message|>Hello!")
    ids = encode(tok, reply)
    result = reasoning.split_reply(tok, prompt, ids)
    assert (result.reasoning, result.answer) == ("User says hi.", "Hello!")
    assert result.reasoning_tokens + result.answer_tokens == len(ids)
    assert result.answer_tokens == len(encode(tok, "Hello!")) + len(
        encode(tok, "<|start|>assistant<|channel|>final<|message|>")) - 1


def test_a_multi_token_marker_is_held_back_until_told_apart(model):
    tok = model("qwen3").tokenizer
    markup = Markup("think", start=tuple(encode(tok, "<t>")),
                              end=tuple(encode(tok, "</t>")))
    ids = encode(tok, "a <b <t>x</t>y<")
    shown, split = labelled(tok, [], ids, markup)
    assert tok.decode([t for t, p in shown if p == "answer"]) == "a <b y<"
    assert tok.decode([t for t, p in shown if p == "reasoning"]) == "x"
    assert split.reasoning_tokens + split.answer_tokens == len(ids)


def conversation(loaded, tmp_path, **generation) -> Conversation:
    settings = Settings(generation=GenerationSettings(temperature=0.0, **generation))
    tmp_path.mkdir(parents=True, exist_ok=True)
    return open_conversation(settings, store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: loaded).conversation


def test_engine_streams_and_stores_reasoning_apart(model, tmp_path):
    loaded = model("qwen3_moe-r1")  # its generation prompt opens reasoning
    conv = conversation(loaded, tmp_path, max_tokens=4, max_reasoning_tokens=7)
    events = list(conv.turns.send("Why is the sky blue?"))
    done = events[-1]
    assert isinstance(done, TurnDone)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    prompt = conv.messages[0].token_ids
    body = done.token_ids[:-1] if done.stats.finish_reason == "stop" else done.token_ids
    expect = reasoning.split_reply(loaded.tokenizer, prompt, body)
    assert "".join(d.text for d in deltas if d.part == "reasoning").rstrip() == expect.reasoning
    assert "".join(d.text for d in deltas if d.part == "answer") == expect.answer
    assert (done.reasoning, done.reply) == (expect.reasoning, expect.answer)
    stats = done.stats
    assert stats.reasoning_tokens == expect.reasoning_tokens > 0
    assert stats.reasoning_tokens + stats.answer_tokens == stats.generated_tokens
    # A spent budget closes the reasoning with '</think>' (test_reasoning_budget.py).
    closed = len(loaded.tokenizer.think_end_tokens) if stats.reasoning_budget_closed else 0
    assert stats.reasoning_tokens <= 7 + closed and stats.answer_tokens <= 4 + 1
    stored = conv.reload().messages[-1]
    assert stored.content == done.reply and stored.reasoning == (done.reasoning or None)
    assert stored.token_ids == done.token_ids  # the ledger keeps every sampled id
    assert stored.stats.reasoning_tokens == stats.reasoning_tokens
    conv.shutdown()


def test_thinking_switch_reaches_the_template_but_not_the_ledger_key(model, tmp_path):
    loaded = model("qwen3")
    conv = conversation(loaded, tmp_path, max_tokens=3)
    end = loaded.tokenizer.think_end_tokens[0]
    session = conv.session
    on = options_for(session, GenerationSettings(thinking=True))
    off = options_for(session, GenerationSettings(thinking=False))
    assert off.kwargs()["enable_thinking"] is False
    assert key_for(conv.engine, session, on) == key_for(conv.engine, session, off)
    list(conv.turns.send("First question"))
    conv.update_generation(GenerationSettings(temperature=0.0, max_tokens=3, thinking=False))
    list(conv.turns.send("Second question"))
    first, second = (m for m in conv.messages if m.role == "user")
    assert end not in first.token_ids and end in second.token_ids
    assert second.ledger_key == first.ledger_key and not second.ledger_start
    conv.shutdown()


def test_reasoning_effort_reaches_the_gpt_oss_template(model):
    tok = model("gpt_oss").tokenizer
    msgs = [{"role": "user", "content": "hi"}]
    high = TemplateOptions(reasoning_effort="high").kwargs()
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **high)
    assert "Reasoning: high" in text
    assert "Reasoning: high" not in tok.apply_chat_template(msgs, tokenize=False,
                                                             add_generation_prompt=True)


def test_reasoning_settings_are_checked():
    with pytest.raises(ValueError, match="reasoning_effort"):
        GenerationSettings(reasoning_effort="max").check()
    with pytest.raises(ValueError, match="max_reasoning_tokens"):
        GenerationSettings(max_reasoning_tokens=0).check()
    GenerationSettings(thinking=False, reasoning_effort="low").check()


def run(conv: Conversation, line: str):
    from mlxchat.commands import CommandContext, default_registry

    return default_registry().run(line, CommandContext(conversation=conv))


def test_think_and_reasoning_effort_commands(model, tmp_path):
    qwen = conversation(model("qwen3"), tmp_path / "q", max_tokens=2)
    assert run(qwen, "/think off").ok and qwen.generation.thinking is False
    assert qwen.store.get_session(qwen.session.id).settings.thinking is False
    assert "off" in run(qwen, "/think").text
    assert run(qwen, "/think default").ok and qwen.generation.thinking is None
    refused = run(qwen, "/set reasoning_effort high")  # Qwen3's template does not read it
    assert not refused.ok and "reasoning_effort" in refused.text
    assert qwen.generation.reasoning_effort is None
    qwen.shutdown()
    oss = conversation(model("gpt_oss"), tmp_path / "g", max_tokens=2)
    assert oss.views.model_info.reasoning == "harmony"
    assert run(oss, "/set reasoning_effort high").ok
    list(oss.turns.send("hello"))
    first = oss.messages[0]
    assert "Reasoning: high" in model("gpt_oss").tokenizer.decode(first.token_ids)
    assert not run(oss, "/set reasoning_effort extreme").ok
    oss.shutdown()


def test_the_reply_reserve_counts_reasoning_for_models_that_reason(model):
    from mlxchat.engine.core import ChatEngine

    settings = GenerationSettings(max_tokens=100, max_reasoning_tokens=300)
    for name, reasons in (("qwen3_moe-r1", True), ("llama3", False)):
        engine = ChatEngine(model(name))
        half = engine.info.context_window // 2
        budget = 100 + (300 if reasons else 0)
        assert engine.prompts.reply_reserve(settings) == min(budget, half)
        off = GenerationSettings(max_tokens=100, max_reasoning_tokens=300, thinking=False)
        assert engine.prompts.reply_reserve(off) == min(100, half)
        engine.close()


def test_stats_split_reasoning_and_answer(model, tmp_path):
    conv = conversation(model("qwen3_moe-r1"), tmp_path, max_tokens=3, max_reasoning_tokens=5)
    done = [e for e in conv.turns.send("Why?") if isinstance(e, TurnDone)][0]
    table = run(conv, "/stats")
    rows = dict(table.rows)
    s = done.stats
    closed = "; closed at max_reasoning_tokens, then answered" if s.reasoning_budget_closed else ""
    assert rows["reasoning"] == (f"{s.reasoning_tokens} tokens in {s.reasoning_s:.1f} s; "
                                 f"answer {s.generated_tokens - s.reasoning_tokens} tokens"
                                 + closed)
    conv.shutdown()


def test_a_harmony_header_that_never_ends_is_shown_as_text(model):
    tok = model("gpt_oss").tokenizer
    prompt = list(tok.apply_chat_template([{"role": "user", "content": "hi"}],
                                          add_generation_prompt=True))
    ids = encode(tok, "x" * (reasoning.HEADER_MAX + 10))
    result = reasoning.split_reply(tok, prompt, ids)
    assert result.answer == "x" * len(ids) and result.answer_tokens == len(ids)
