"""gpt-oss tool calls: a message to a recipient on the commentary channel is
kept in the reply's text as gpt-oss's template renders a call, shown as a
tool-call block, and never mixed into the answer's prose; '<|call|>' ends
the turn."""

from __future__ import annotations

import json

import pytest

from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.kv.live import LiveCache
from mlxchat.engine.speculative.streams import plain_stream
from mlxchat.engine.turn import reasoning
from mlxchat.engine.turn.decode import Reply, decode
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder, tools
from mlxchat.models.markup import call_start
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store

from .builders import FAMILIES, write_family_model

ARGS = {"city": "Paris", "days": 2}
THOUGHT = "<|channel|>analysis<|message|>Need the weather.<|end|>"
# As the template renders a call back, and as gpt-oss itself writes one.
TEMPLATE_STYLE = (THOUGHT + "<|start|>assistant to=functions.get_weather<|channel|>commentary "
                  f"json<|message|>{json.dumps(ARGS)}")
MODEL_STYLE = (THOUGHT + "<|start|>assistant<|channel|>commentary to=functions.get_weather "
               f"<|constrain|>json<|message|>{json.dumps(ARGS)}")


@pytest.fixture(scope="module")
def oss(tmp_path_factory):
    fam = next(f for f in FAMILIES if f.name == "gpt_oss")
    return load_folder(write_family_model(fam, tmp_path_factory.mktemp("oss")))


def enc(tok, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def prompt_of(tok) -> list[int]:
    return list(tok.apply_chat_template([{"role": "user", "content": "Weather?"}],
                                        add_generation_prompt=True))


@pytest.mark.parametrize("reply", [TEMPLATE_STYLE, MODEL_STYLE])
def test_a_commentary_call_is_a_tool_call_not_answer_text(oss, reply):
    tok = oss.tokenizer
    call = tok.convert_tokens_to_ids("<|call|>")
    assert call in tok.eos_token_ids  # the turn ends with the call
    split = reasoning.split_reply(tok, prompt_of(tok), enc(tok, reply), end_token=call)
    assert split.reasoning == "Need the weather."
    assert split.answer == call_start("functions.get_weather") + json.dumps(ARGS) + "<|call|>"
    assert tools.split_tool_calls(tok, split.answer) == [tools.ToolCall("get_weather", ARGS)]
    shown = tools.as_markdown(tools.split_tool_calls(tok, split.answer))
    assert "<|" not in shown and "`get_weather`" in shown
    assert json.loads(shown.split("```json\n")[1].split("\n```")[0]) == ARGS


def test_final_answers_and_preambles_stay_plain_text(oss):
    tok = oss.tokenizer
    reply = ("<|channel|>commentary<|message|>Checking.<|end|>"
             "<|start|>assistant<|channel|>final<|message|>Sunny.")
    split = reasoning.split_reply(tok, prompt_of(tok), enc(tok, reply))
    assert split.answer == "Checking.Sunny."
    assert tools.split_tool_calls(tok, split.answer) == ["Checking.Sunny."]


def test_a_call_cut_short_stays_as_written(oss):
    tok = oss.tokenizer
    split = reasoning.split_reply(tok, prompt_of(tok), enc(tok, TEMPLATE_STYLE)[:-3])
    assert tools.split_tool_calls(tok, split.answer) == [split.answer]  # unreadable: as is


def test_decode_closes_the_call_at_its_end_token(oss):
    """The engine's decode loop on a scripted stream of gpt-oss's tokens (the
    model runs; its samples are replaced by the reply under test)."""
    tok = oss.tokenizer
    scripted = enc(tok, TEMPLATE_STYLE) + [tok.convert_tokens_to_ids("<|call|>")]
    prompt, live = prompt_of(tok), LiveCache(oss.model)
    live.feed(oss.model, prompt[:-1])

    def open_stream(*, tail, history, budget, sampler, processors, count):
        real = plain_stream(oss.model, live, tail, budget=budget, sampler=sampler,
                            processors=processors, count=count)
        return ((want, False) for want, _ in zip(scripted, real))
    settings = GenerationSettings(temperature=0.0, max_tokens=200)
    events: list = []
    out = decode(tok, live, prompt[-1:], Reply(settings, 4096, 0.0, prompt),
                 open_stream=open_stream, emit=events.append, cancelled=lambda: False)
    assert out.finish_reason == "stop" and out.token_ids == scripted
    assert out.reasoning == "Need the weather."
    assert out.reply.endswith("<|call|>") and "".join(
        e.text for e in events if e.part == "answer") == out.reply
    assert tools.split_tool_calls(tok, out.reply) == [tools.ToolCall("get_weather", ARGS)]


def test_the_conversation_formats_a_stored_gpt_oss_call(oss, tmp_path):
    conv = Conversation(settings=Settings(generation=GenerationSettings(max_tokens=2)),
                        store=open_store(tmp_path / "s.db"), engine=ChatEngine(oss),
                        model_spec="tiny")
    answer = call_start("functions.get_weather") + json.dumps(ARGS) + "<|call|>"
    shown = conv.views.display_text(answer)
    assert shown.startswith("**Tool call** `get_weather`") and "<|" not in shown
    stream = conv.views.reply_stream()
    pieces = [stream.add(answer[i:i + 5]) for i in range(0, len(answer), 5)]
    assert "".join(pieces[:-1]) == ""  # nothing of a call in progress is shown
    assert ("".join(pieces) + stream.finish()).strip("\n") == shown
    conv.close()
