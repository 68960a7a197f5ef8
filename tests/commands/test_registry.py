"""Parsing, dispatch and the never-raise guarantee of the registry."""

from __future__ import annotations

import logging

import pytest

from mlxchat.commands import (
    Args,
    Command,
    CommandContext,
    CommandResult,
    Confirmation,
    Registry,
)
from mlxchat.engine.events import PrefillProgress


def test_unknown_command_answers_the_closest_match(registry, ctx):
    result = registry.run("/sesions", ctx)
    assert result.kind == "error"
    assert result.text == "Unknown command /sesions. Did you mean /sessions?"
    assert "Did you mean /quit?" in registry.run("/quti", ctx).text
    assert registry.run("/zzqxv", ctx).text == "Unknown command /zzqxv. /help lists the commands."


def test_not_a_command(registry, ctx):
    assert registry.run("hello", ctx).kind == "error"
    assert "after '/'" in registry.run("/", ctx).text
    assert registry.is_command("  /help") and not registry.is_command("//literal")
    assert not registry.is_command("text /help")


def test_aliases_and_case(registry, ctx):
    for line in ("/quit", "/exit", "/q", "/QUIT", "  /Exit  "):
        assert registry.run(line, ctx).quit, line


@pytest.mark.parametrize("line, usage", [
    ("/fork now", "Usage: /fork"),
    ("/set temperature", "Usage: /set [--default] NAME VALUE"),
    ("/set a b c", "Usage: /set [--default] NAME VALUE"),
    ("/rename", "Usage: /rename TITLE"),
    ("/rename    ", "Usage: /rename TITLE"),
    ("/export", "Usage: /export md|json [PATH]"),
    ("/import", "Usage: /import PATH.json"),
    ("/copy 1 2", "Usage: /copy [N]"),
])
def test_wrong_arguments_answer_the_usage_line(registry, ctx, line, usage):
    result = registry.run(line, ctx)
    assert result.kind == "error" and result.text == usage


def test_unbalanced_quotes_are_a_clean_error(registry, ctx):
    result = registry.run('/export md "half open', ctx)
    assert result.kind == "error"
    assert "No closing quotation" in result.text and "Usage: /export" in result.text
    assert "\n" not in result.text
    assert registry.run("/set seed 1\\", ctx).kind == "error"


def test_quoted_words(registry, ctx, tmp_path):
    result = registry.run('/export md "my notes"', ctx)
    assert result.ok, result.text
    assert (tmp_path / "work" / "my notes.md").is_file()  # a path is the user's, as typed


def test_free_text_keeps_quotes_and_apostrophes(registry, ctx, conv):
    text = 'Don\'t be "shy";  say it\nplainly.'
    assert registry.run(f"/system {text}", ctx).ok
    assert conv.session.system_prompt == text
    assert registry.run('/rename "Quoted title"', ctx).ok
    assert conv.session.title == "Quoted title"
    assert registry.run("/rename it's mine", ctx).ok
    assert conv.session.title == "it's mine"


def test_unknown_option(registry, ctx):
    result = registry.run("/set --bogus temperature 1", ctx)
    assert result.text.startswith("Unknown option --bogus for /set.")


def test_a_failing_handler_becomes_one_line_and_is_logged(ctx, caplog):
    def boom(ctx: CommandContext, args: Args) -> CommandResult:
        raise RuntimeError("bad\nthing")

    def wrong(ctx: CommandContext, args: Args) -> CommandResult:
        return "not a result"  # type: ignore[return-value]
    reg = Registry([Command("boom", boom, "explodes"), Command("wrong", wrong, "misbehaves")])
    with caplog.at_level(logging.ERROR, logger="mlxchat.commands.registry"):
        result = reg.run("/boom", ctx)
    assert result.kind == "error"
    assert result.text == "/boom failed: RuntimeError: bad thing. Details are in the log."
    assert any(r.exc_info and r.exc_info[0] is RuntimeError for r in caplog.records)
    assert reg.run("/wrong", ctx).kind == "error"


def test_a_failing_confirmation_is_guarded(ctx):
    def ask(ctx: CommandContext, args: Args) -> CommandResult:
        def accept() -> CommandResult:
            raise ValueError("disk on fire")
        return CommandResult("confirm", "Sure?", confirm=Confirmation("Sure?", accept))
    reg = Registry([Command("risky", ask, "asks first")])
    result = reg.run("/risky", ctx)
    assert result.kind == "confirm" and result.confirm is not None
    after = result.confirm.accept()
    assert after.kind == "error" and "disk on fire" in after.text
    ctx.assume_yes = True
    assert reg.run("/risky", ctx).kind == "error"


def test_commands_that_change_state_wait_for_the_running_turn(registry, ctx, conv):
    turn = conv.turns.send("Count to three, please.")
    assert isinstance(next(turn), PrefillProgress)  # the engine is now busy
    try:
        refused = registry.run("/new", ctx)
        assert refused.kind == "error" and "being generated" in refused.text
        assert registry.run("/get", ctx).ok
        assert registry.run("/context", ctx).ok
    finally:
        turn.close()
    assert registry.run("/new", ctx).ok


def test_help(registry, ctx):
    listing = registry.run("/help", ctx)
    assert listing.kind == "markdown" and listing.open_screen is None
    assert "**Sessions**" in listing.text
    for command in registry.commands:  # each with its meaning, by topic
        assert f"- `{command.usage_line}` — {command.help}" in listing.text
    assert sorted(registry.help_rows()) == sorted((c.usage_line, c.help)
                                                  for c in registry.commands)
    ctx.interactive = True
    assert registry.run("/help", ctx).open_screen == "help"
    one = registry.run("/help quit", ctx)
    assert one.kind == "markdown" and "/exit" in one.text and "/q" in one.text
    assert registry.run("/help /set", ctx).text.startswith("**/set")
    assert "Did you mean /stats?" in registry.run("/help stat", ctx).text


def test_plain_renders_tables_aligned():
    result = CommandResult.table("Caption", ("a", "bb"), [("xxx", 1), ("y", 22)])
    assert result.plain().splitlines() == ["Caption", "a    bb", "xxx  1", "y    22"]
    assert CommandResult.error("two\nlines").text == "two lines"


def test_names_are_unique():
    reg = Registry()
    with pytest.raises(ValueError):
        reg.add(Command("other", lambda c, a: CommandResult(), "x", aliases=("help",)))
