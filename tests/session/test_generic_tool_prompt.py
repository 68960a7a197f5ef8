"""Tools for a model whose chat template renders none (the tiny model's ChatML,
as the bundled SmolLM2's): the user is told, once, that the model cannot see
them, and what works. With ``tool_prompt generic`` the generic tool prompt
puts the definitions in the system prompt, a call written as it asks runs
after the user's consent, its result goes back as the template can show it
(a user turn) and only that is prefilled."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mlxchat.commands import CommandContext, default_registry
from mlxchat.models import load_folder
from mlxchat.models.tool_prompt import MEASURED, renders_tools
from mlxchat.session.root import open_conversation
from mlxchat.session.tool_loop import Consent
from mlxchat.store import open_store

from tests.scripted import Scripted
from tests.server.conftest import tiny_settings
from tests.session.test_tool_loop import ROOT, Asked, extends, finish
from tests.tools.servers import host_for, ran


def generic_call(tool: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


@pytest.fixture(scope="module")
def markers(tmp_path_factory):
    return tmp_path_factory.mktemp("markers")


@pytest.fixture(scope="module")
def host(markers, tmp_path_factory):
    running = host_for(markers, tmp_path_factory.mktemp("logs"))
    yield running
    running.close()


def open_conv(tiny, db, host, **generation):
    settings = tiny_settings(200)
    settings.generation = replace(settings.generation, **{"tools": "t.get_weather",
                                                           **generation})
    return open_conversation(settings, store_factory=lambda: open_store(db),
                             load_model=lambda spec, progress=None: tiny,
                             tool_host=host).conversation


def test_whether_a_template_renders_tools_is_found_by_rendering_it(tiny, tmp_path):
    from tests.families.builders import with_template, write_family_model

    qwen3 = write_family_model(with_template("qwen3", (
        ROOT / "tests/families/real_templates/qwen3.jinja").read_text()), tmp_path / "q")
    assert renders_tools(tiny.tokenizer) is False
    assert renders_tools(load_folder(qwen3).tokenizer) is True


def test_by_default_the_model_cannot_see_the_tools_and_the_user_is_told_once(
        tiny, host, monkeypatch, tmp_path):
    conv = open_conv(tiny, tmp_path / "s.db", host)
    try:
        note = conv.tools.template_note()
        assert note == ("tiny's chat template has no place for tools: the model does not see "
                        "them and cannot call one. Use a model whose template speaks tools "
                        "(Qwen3, Llama 3.1+, Mistral), or /set tool_prompt generic to describe "
                        f"them in the system prompt ({MEASURED}).")
        assert conv.tools.ready() == [note]  # before the first message with tools
        assert conv.tools.ready() == []  # once
        Scripted(tiny.tokenizer, monkeypatch).reply("Sunny, surely.")
        finish(conv.turns.send("Weather in Oslo?"))
        assert "get_weather" not in tiny.tokenizer.decode(conv.messages[0].token_ids)
    finally:
        conv.shutdown()


def test_the_generic_prompt_shows_the_tools_and_a_call_written_its_way_runs(
        tiny, host, markers, monkeypatch, tmp_path):
    conv = open_conv(tiny, tmp_path / "s.db", host, tool_prompt="generic")
    tok = tiny.tokenizer
    try:
        assert "they are described in the system prompt" in conv.tools.ready()[0]
        scripted = Scripted(tok, monkeypatch)
        scripted.reply(generic_call("get_weather", city="Oslo"))
        first = finish(conv.turns.send("Weather in Oslo?"))
        prompt = tok.decode(conv.messages[0].token_ids)
        assert '"name": "get_weather"' in prompt and "<tool_call>" in prompt
        asked = Asked(Consent("once"))
        step = conv.tool_loop.step(first, consent=asked)
        assert asked.asked == [("t.get_weather", {"city": "Oslo"})]
        assert ran(markers, "get_weather") == ["Oslo"]
        scripted.reply("Sunny.")
        answered = finish(step.turn)
        result = conv.messages[-2]
        extends(answered.stats, first.stats, result)
        assert "Tool result (get_weather):\nSunny in Oslo, 21 C" in tok.decode(result.token_ids)
        assert [m.role for m in conv.messages] == ["user", "assistant", "tool", "assistant"]
        assert conv.messages[1].tool_calls[0].name == "get_weather"
    finally:
        conv.shutdown()


def test_the_tools_command_says_when_the_template_cannot_show_tools(tiny, host, tmp_path):
    conv = open_conv(tiny, tmp_path / "s.db", host, tools=None)
    registry, ctx = default_registry(), CommandContext(conv, interactive=False)
    try:
        note = conv.tools.template_note()
        on = registry.run("/tools on", ctx).text
        assert on == f"Tools for this session: *.\n{note}"
        assert f"**Note:** {note}" in registry.run("/tools", ctx).text
        assert registry.run("/tools off", ctx).text == "Tools for this session: none."
        registry.run("/set tool_prompt generic", ctx)
        generic = conv.tools.template_note()
        assert generic != note and "(tool_prompt generic)" in generic
        assert f"**Note:** {generic}" in registry.run("/tools", ctx).text
    finally:
        conv.shutdown()
