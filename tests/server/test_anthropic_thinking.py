"""``thinking`` through Anthropic's Messages API: a model's reasoning comes
back as a ``thinking`` block (streamed as ``thinking_delta``) before the
answer's text, ``budget_tokens`` bounds it (closed as the family writes it),
and ``disabled`` reaches the template as enable_thinking=False."""

from __future__ import annotations

import pytest
from anthropic import Anthropic

from mlxchat.models import load_folder
from mlxchat.models.markup import markup_of

from tests.families.builders import write_family_model
from tests.families.test_real_templates import real_family
from tests.scripted import Scripted
from tests.server.conftest import real_qwen3, serve

HI = [{"role": "user", "content": "Is it sunny?"}]


def _client(url: str) -> Anthropic:
    return Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return real_qwen3(tmp_path_factory.mktemp("qwen3-thinking"))


@pytest.fixture(scope="module")
def r1(tmp_path_factory):
    """A distill whose generation prompt opens the reasoning (random weights never close it)."""
    folder = write_family_model(real_family("deepseek-r1-distill"),
                                tmp_path_factory.mktemp("r1"))
    return load_folder(folder, name="tiny", spec="tiny")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_reasoning_comes_back_as_a_thinking_block(qwen3, tmp_path, monkeypatch, stream):
    scripted = Scripted(qwen3.tokenizer, monkeypatch)
    served = serve(qwen3, tmp_path / "s.db", max_tokens=100)
    try:
        scripted.reply("<think>\nThe sky is clear.\n</think>\n\nYes, sunny.")
        kw = {"model": "tiny", "max_tokens": 100, "messages": HI,
              "thinking": {"type": "enabled", "budget_tokens": 64}}
        if stream:
            with _client(served.url).messages.stream(**kw) as events:
                deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
                reply = events.get_final_message()
            assert deltas[0] == "thinking_delta" and deltas[-1] == "text_delta"
        else:
            reply = _client(served.url).messages.create(**kw)
        thought, said = reply.content
        assert thought.type == "thinking" and "The sky is clear." in thought.thinking
        assert (said.type, said.text, reply.stop_reason) == ("text", "Yes, sunny.", "end_turn")
        stored = served.conv.messages[-1]
        assert stored.content == "Yes, sunny." and "The sky is clear." in stored.reasoning
        assert reply.usage.output_tokens == served.conv.turns.last_stats.generated_tokens
        # The thinking block sent back is the client's copy: the branch is found.
        scripted.reply("Good.")
        after = _client(served.url).messages.create(
            model="tiny", max_tokens=100, thinking={"type": "enabled", "budget_tokens": 64},
            messages=HI + [reply.to_param(), {"role": "user", "content": "Thanks."}])
        assert after.usage.cache_read_input_tokens == served.conv.turns.last_stats.reused_tokens
        assert not served.conv.messages[-2].ledger_start
    finally:
        served.stop()


def test_disabled_thinking_reaches_the_template(qwen3, tmp_path):
    served = serve(qwen3, tmp_path / "s.db", max_tokens=2)
    try:
        api = _client(served.url)
        off = api.messages.count_tokens(model="tiny", messages=HI,
                                        thinking={"type": "disabled"})
        on = api.messages.count_tokens(model="tiny", messages=HI,
                                       thinking={"type": "enabled", "budget_tokens": 8})
        api.messages.create(model="tiny", max_tokens=2, messages=HI,
                            thinking={"type": "disabled"})
        prompt = qwen3.tokenizer.decode(served.conv.messages[-2].token_ids)
        assert prompt.endswith("<think>\n\n</think>\n\n")  # Qwen3's way to think no more
        assert served.conv.turns.last_stats.prompt_tokens == off.input_tokens > on.input_tokens
    finally:
        served.stop()


def test_the_budget_bounds_the_reasoning(r1, tmp_path):
    served = serve(r1, tmp_path / "s.db", max_tokens=6)
    try:
        reply = _client(served.url).messages.create(
            model="tiny", max_tokens=6, messages=HI,
            thinking={"type": "enabled", "budget_tokens": 5})
        stats = served.conv.turns.last_stats
        assert stats.reasoning_budget_closed
        # Sampled to the budget, then closed with the family's own markup.
        closing = list(markup_of(r1.tokenizer).end)
        assert served.conv.messages[-1].token_ids[5:5 + len(closing)] == closing
        assert reply.content[0].type == "thinking"
        assert reply.content[0].thinking == served.conv.messages[-1].reasoning
        assert reply.usage.output_tokens == stats.generated_tokens
    finally:
        served.stop()
