"""System and developer messages anywhere in a conversation, by one rule for
every route (``server.core.system_messages``): rendered where they stand
where the template renders them there (the tiny model's ChatML), folded into
the user turn beside them where it does not (Gemma 3's real template); each
place depends only on its neighbours, so a conversation resent with more
after it extends its token ledger and prefills only what is new."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxchat.models import load_folder
from mlxchat.server.core.api_turns import IncomingMessage
from mlxchat.server.core.system_messages import place_system_messages, renders_system_anywhere
from tests.families.builders import with_template, write_family_model
from tests.server.conftest import request, serve
from tests.server.test_serve import client

U, A, S, T = "user", "assistant", "system", "tool"


def _msgs(*pairs: tuple[str, str]) -> list[IncomingMessage]:
    return [IncomingMessage(role, text) for role, text in pairs]


def _shape(messages: list[IncomingMessage]) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in messages]


@pytest.mark.parametrize("given, folded", [
    ([(U, "u"), (S, "s")], [(U, "u\n\ns")]),  # Claude Code's first request
    ([(U, "u"), (S, "s"), (A, "a"), (T, "r")], [(U, "u\n\ns"), (A, "a"), (T, "r")]),
    ([(U, "u"), (A, "a"), (S, "s"), (U, "v")], [(U, "u"), (A, "a"), (U, "s\n\nv")]),
    ([(U, "u"), (A, "a"), (S, "s")], [(U, "u"), (A, "a"), (U, "s")]),
    ([(U, "u"), (A, "a"), (T, "r"), (S, "s")], [(U, "u"), (A, "a"), (T, "r"), (U, "s")]),
    ([(U, "u"), (A, "a"), (S, "s"), (S, "t")], [(U, "u"), (A, "a"), (U, "s\n\nt")]),
])
def test_where_the_template_cannot_a_system_message_folds_into_a_user_turn(given, folded):
    messages = _msgs(*given)
    assert _shape(place_system_messages(messages, in_place=False)) == folded
    assert place_system_messages(messages, in_place=True) == messages


def test_each_place_holds_when_the_conversation_goes_on():
    """Every request of a session, each ending where a client would send it:
    the earlier messages come out the same in each, so the ledger extends."""
    whole = _msgs((U, "task"), (S, "env"), (A, "call"), (T, "result"), (A, "done"),
                  (S, "note"), (U, "next"), (A, "ok"), (U, "more"), (S, "late"))
    ends = [i + 1 for i, m in enumerate(whole) if m.role in (U, T, S)
            and (i + 1 == len(whole) or whole[i + 1].role == A)]
    placed = [place_system_messages(whole[:end], in_place=False) for end in ends]
    for shorter, longer in zip(placed, placed[1:]):
        assert longer[:len(shorter)] == shorter


def _gemma3(folder: Path):
    real = Path(__file__).parents[1] / "families" / "real_templates" / "gemma-3.jinja"
    family = with_template("gemma3", real.read_text())
    return load_folder(write_family_model(family, folder), name="tiny", spec="tiny")


def test_the_probe_tells_chatml_from_gemmas_template(tiny, tmp_path):
    assert renders_system_anywhere(tiny.tokenizer)
    assert not renders_system_anywhere(_gemma3(tmp_path / "gemma3").tokenizer)


def test_mid_conversation_system_and_developer_messages_are_rendered_where_they_stand(served):
    api = client(served.url)
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Tell me about herons."},
                {"role": "developer", "content": "Answer in French."}]
    first = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                        max_tokens=8)
    conv = served.conv
    session = conv.store.get_session(conv.store.list_sessions()[0].id)
    assert [(m.role, m.content) for m in session.messages][:2] == [
        (U, "Tell me about herons."), (S, "Answer in French.")]
    tokenizer = conv.engine.loaded.tokenizer
    prompt = tokenizer.decode(session.messages[0].token_ids)
    assert prompt.index("Tell me about herons.") < prompt.index(
        "<|im_start|>system\nAnswer in French.<|im_end|>")
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "system", "content": "Now in English."},
                 {"role": "user", "content": "And their nests?"}]
    second = api.chat.completions.create(model="tiny", messages=messages, temperature=0,
                                         max_tokens=8)
    stats = conv.turns.last_stats
    assert second.usage.prompt_tokens_details.cached_tokens == stats.reused_tokens \
        == first.usage.prompt_tokens + first.usage.completion_tokens
    assert len(conv.store.list_sessions()) == 1  # the same conversation, extended


def test_ollama_takes_a_system_message_after_the_first_turn(served):
    reply = request(served.url, "POST", "/api/chat", {
        "model": "tiny", "stream": False, "options": {"temperature": 0, "num_predict": 4},
        "messages": [{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": "Hello."},
                     {"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "More?"}]})
    assert reply.status == 200, reply.body
    assert reply.json()["done"] is True


def test_where_the_template_refuses_it_the_system_text_joins_the_user_turn(tmp_path):
    served = serve(_gemma3(tmp_path / "gemma3"), tmp_path / "s.db")
    try:
        reply = client(served.url).chat.completions.create(
            model="tiny", temperature=0, max_tokens=4,
            messages=[{"role": "user", "content": "Tell me about herons."},
                      {"role": "system", "content": "Answer in French."}])
        assert reply.choices[0].finish_reason in ("stop", "length")
        conv = served.conv
        session = conv.store.get_session(conv.store.list_sessions()[0].id)
        assert [(m.role, m.content) for m in session.messages][:1] == [
            (U, "Tell me about herons.\n\nAnswer in French.")]
    finally:
        served.stop()
