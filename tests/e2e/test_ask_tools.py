"""`mlxchat ask --tools`, in-process on a tiny Qwen3 with its real template and
the test MCP server in mcp.json: with no terminal a call is refused in one
line (the server never sees it) unless --allow-tools names it; on a terminal
the question is asked there (a pseudo-terminal stands in for /dev/tty)."""

from __future__ import annotations

import json
import os
import select
from pathlib import Path

import pytest

from mlxchat import cli, paths
from mlxchat.cli import tool_consent
from mlxchat.cli.tool_consent import TerminalConsent
from mlxchat.models import load_folder
from mlxchat.session.tool_loop import Consent, ConsentRequest
from mlxchat.tools.catalog import ToolInfo

from tests.families.builders import with_template, write_family_model
from tests.scripted import Scripted
from tests.tools.servers import entry, qwen_call, ran

REAL = Path(__file__).parents[1] / "families" / "real_templates" / "qwen3.jinja"



@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    return write_family_model(with_template("qwen3", REAL.read_text()),
                              tmp_path_factory.mktemp("qwen3-ask"))


def test_no_terminal_refuses_a_call_unless_allow_tools_names_it(qwen3_dir, tmp_path, capsys,
                                                                 monkeypatch):
    markers = tmp_path / "markers"
    markers.mkdir()
    paths.ensure_private_dir(paths.config_dir())
    paths.mcp_config_file().write_text(json.dumps({"mcpServers": {"t": entry(markers)}}))
    monkeypatch.setattr(tool_consent, "TTY", str(tmp_path / "no-such-tty"))
    Scripted(load_folder(qwen3_dir).tokenizer, monkeypatch).replies(
        qwen_call("write_note", text="hello"), qwen_call("get_weather", city="Oslo"), "Sunny.")
    code = cli.main(["ask", "--model", str(qwen3_dir), "--temp", "0", "--json",
                     "--max-tokens", "200", "--tools", "t.write_note,t.get_weather",
                     "--allow-tools", "get_weather", "Note it, then the weather"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "mlxchat: refused t.write_note: there is no terminal to ask " \
           "(--allow-tools t.write_note lets it run)" in err
    assert ran(markers, "write_note") == [] and ran(markers, "get_weather") == ["Oslo"]
    data = json.loads(out)
    assert data["reply"] == "Sunny."
    assert [(s["tool"], s["note"]) for s in data["tool_steps"]] == [
        ("write_note", "denied: no one could be asked (no terminal), so it was refused"),
        ("get_weather", "")]
    assert "[tool t.get_weather · " in err


@pytest.mark.parametrize("typed, answer", [
    ("a\n", Consent("once")), ("\n", Consent("deny")), ("s\n", Consent("session")),
    ("r\nnot today\n", Consent("deny", "not today")), ("x\ne\n", Consent("everywhere"))])
def test_the_terminal_is_asked_and_answers(typed, answer):
    leader, follower = os.openpty()
    try:
        os.write(leader, typed.encode())
        consent = TerminalConsent(tty=os.ttyname(follower))
        tool = ToolInfo("t", "write_note", "Write a note", destructive=True)
        assert consent(ConsentRequest(tool, {"text": "hi"}, "write_note")) == answer
        shown = ""
        while select.select([leader], [], [], 0.5)[0]:  # echo and all the question
            shown += os.read(leader, 4096).decode()
        assert "The model wants to run t.write_note: Write a note" in shown
        assert '"text": "hi"' in shown and "may change or delete things" in shown
    finally:
        os.close(leader)
        os.close(follower)


@pytest.mark.parametrize("mcp, tools, said", [
    ({"t": {"command": "true"}}, "nosuch", "No MCP server named 'nosuch' (configured: t)."),
    ({"t": {"command": "true"}}, "t.x,-other.y", "No MCP server named 'other' (configured: t)."),
    (None, "*", "No MCP server is configured: add one to {path} or run mlxchat tools import "
                "FILE.")])
def test_tools_naming_no_configured_server_is_one_line_and_exit_2_before_any_load(
        mcp, tools, said, tmp_path, capsys):
    if mcp is not None:
        paths.ensure_private_dir(paths.config_dir())
        paths.mcp_config_file().write_text(json.dumps({"mcpServers": mcp}))
    # No such model: had it been loaded first, that would be the error.
    code = cli.main(["ask", "--model", str(tmp_path / "no-model"), "--tools", tools, "hi"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == f"mlxchat: error: {said.format(path=paths.mcp_config_file())}\n"


@pytest.mark.parametrize("generic", [False, True])
def test_tools_on_a_template_without_tools_is_said_and_the_generic_prompt_runs_calls(
        generic, tmp_path, capsys, monkeypatch):
    from mlxchat.models.testing.text import write_tiny_model

    folder = write_tiny_model(tmp_path / "tiny")  # ChatML without tools, as SmolLM2's
    markers = tmp_path / "markers"
    markers.mkdir()
    paths.ensure_private_dir(paths.config_dir())
    paths.mcp_config_file().write_text(json.dumps({"mcpServers": {"t": entry(markers)}}))
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    replies = (call, "Sunny.") if generic else ("Sunny.",)
    Scripted(load_folder(folder).tokenizer, monkeypatch).replies(*replies)
    code = cli.main(["ask", "--model", str(folder), "--temp", "0", "--max-tokens", "100",
                     "--tools", "t.get_weather", "--allow-tools", "t.get_weather",
                     *(["--tool-prompt", "generic"] if generic else []), "Weather in Oslo?"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (note,) = [line for line in err.splitlines() if "chat template has no place" in line]
    assert note.startswith("mlxchat: tiny's chat template has no place for tools")
    assert out.strip().endswith("Sunny.")
    if generic:
        assert "(tool_prompt generic)" in note and ran(markers, "get_weather") == ["Oslo"]
    else:
        assert "--tool-prompt generic to describe them" in note
