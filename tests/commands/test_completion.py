"""complete(text, ctx): command names, then each command's arguments."""

from __future__ import annotations

import dataclasses

from mlxchat.commands import Completion

from tests.commands.conftest import send


def values(registry, ctx, text: str) -> list[str]:
    return [c.value for c in registry.complete(text, ctx)]


def test_the_prompt_lists_the_registrys_completions():
    from mlxchat.tui.widgets import prompt

    assert prompt.Completion is Completion
    assert [f.name for f in dataclasses.fields(Completion)] == ["value", "display", "help"]


def test_command_names(registry, ctx):
    everything = registry.complete("/", ctx)
    assert len(everything) == len(registry.commands)
    assert all(c.help for c in everything)
    assert values(registry, ctx, "/se") == ["/sessions ", "/set "]
    assert values(registry, ctx, "/ne") == ["/new"]  # no arguments: no trailing space
    assert values(registry, ctx, "/ex") == ["/export ", "/quit"]  # /exit is an alias of /quit
    assert values(registry, ctx, "/SE") == ["/sessions ", "/set "]
    assert registry.complete("/se", ctx)[0] == Completion("/sessions ", "/sessions",
                                                          registry.get("sessions").help)


def test_nothing_for_plain_text_unknown_commands_or_commands_without_arguments(registry, ctx):
    for text in ("", "hello", "//x", "/nosuch ", "/new ", "/retry x"):
        assert registry.complete(text, ctx) == [], text


def test_session_titles(registry, ctx, conv):
    send(conv, "Penguin facts")
    registry.run("/new", ctx)
    send(conv, "Volcano facts")
    assert values(registry, ctx, "/open P") == ["/open Penguin facts"]
    opened = registry.complete("/open ", ctx)
    assert [c.display for c in opened] == ["Volcano facts", "Penguin facts"]
    assert opened[1].help.startswith("#1 · 2 messages")
    assert values(registry, ctx, "/delete v") == ["/delete Volcano facts"]
    assert values(registry, ctx, "/open #") == ["/open #2", "/open #1"]
    assert values(registry, ctx, "/rename ") == ["/rename Volcano facts"]


def test_duplicate_titles_complete_to_ids(registry, ctx, conv):
    send(conv, "One")  # an empty session goes when left
    registry.run("/rename Same", ctx)
    registry.run("/new", ctx)
    registry.run("/rename Same", ctx)
    assert values(registry, ctx, "/open ") == ["/open #2", "/open #1"]


def test_model_aliases(registry, ctx):
    assert "/model smollm2-135m" in values(registry, ctx, "/model ")
    assert values(registry, ctx, "/model smol") == [
        "/model smollm2-135m", "/model smolvlm-256m", "/model smolvlm-500m"]
    assert values(registry, ctx, "/model smoll") == ["/model smollm2-135m"]


def test_settings_and_values(registry, ctx):
    from mlxchat.commands.tuning import SETTINGS

    names = values(registry, ctx, "/set ")
    assert names == [f"/set {name} " for name in SETTINGS] and names[0] == "/set temperature "
    assert values(registry, ctx, "/set kv") == ["/set kv_bits "]
    assert values(registry, ctx, "/set kv_bits ") == [
        "/set kv_bits none", "/set kv_bits 4", "/set kv_bits 8"]
    assert values(registry, ctx, "/set context_policy s") == ["/set context_policy stop"]
    assert values(registry, ctx, "/set temperature ") == [
        "/set temperature 0.0", "/set temperature model"]  # current, then the model's
    assert values(registry, ctx, "/set --d") == ["/set --default "]
    assert values(registry, ctx, "/set --default top") == ["/set --default top_p ",
                                                           "/set --default top_k "]
    assert values(registry, ctx, "/set seed 1 ") == []
    assert values(registry, ctx, "/get m") == ["/get min_p", "/get max_tokens",
                                              "/get max_reasoning_tokens",
                                              "/get max_tool_steps"]


def test_paths(registry, ctx, tmp_path):
    work = tmp_path / "work"
    (work / "notes.txt").write_text("x")
    (work / ".hidden").write_text("x")
    (work / "my docs").mkdir()
    (work / "my docs" / "plan.md").write_text("x")
    (work / "session.json").write_text("{}")
    assert values(registry, ctx, "/attach ") == [
        "/attach --clear", "/attach my docs/", "/attach notes.txt", "/attach session.json"]
    assert values(registry, ctx, "/attach my docs/") == ["/attach my docs/plan.md"]
    assert values(registry, ctx, "/attach .h") == ["/attach .hidden"]
    assert values(registry, ctx, "/import ") == ["/import 'my docs'/", "/import session.json"]
    assert values(registry, ctx, "/import 'my docs'/") == []  # plan.md is not .json
    assert values(registry, ctx, "/export ") == ["/export md ", "/export json "]
    assert values(registry, ctx, "/export md no") == ["/export md notes.txt"]
    assert values(registry, ctx, '/export md "my d') == ["/export md 'my docs'/"]
    assert values(registry, ctx, f"/attach {work}/no") == [f"/attach {work}/notes.txt"]
    assert values(registry, ctx, "/attach /no/such/dir/") == []


def test_branches_code_blocks_help_and_cache(registry, ctx, conv):
    send(conv, "First")
    old = conv.session.leaf_id
    for event in registry.run("/edit Second", ctx).turn:
        pass
    branch = registry.complete("/branch ", ctx)
    assert [c.display for c in branch] == [str(old), str(conv.session.leaf_id)]
    assert branch[1].help.endswith("current")
    conv.store.add_message(conv.session.id, "user", "code please")
    conv.store.add_message(conv.session.id, "assistant", "```py\nx = 1\n```")
    conv.reload()
    assert [(c.value, c.help) for c in registry.complete("/copy ", ctx)] == [
        ("/copy 1", "py · x = 1")]
    assert values(registry, ctx, "/help st") == ["/help stats"]
    assert values(registry, ctx, "/cache ") == ["/cache save", "/cache drop"]
    assert values(registry, ctx, "/system ") == ["/system --clear", "/system You are terse."]


def test_completion_never_raises(registry, ctx):
    for text in ('/set "', "/open '", "/attach \0", "/export md \\", "/" + "x" * 5000,
                 "/attach ~nosuchuser/", "/branch " + "9" * 40, "/model \n\n"):
        assert isinstance(registry.complete(text, ctx), list)
