"""mcp.json as users already have it: servers read and expanded, a bad entry
kept with its one line why (the others still usable), and `mlxchat tools
import` of Claude Desktop, Cursor, LM Studio and VS Code files."""

from __future__ import annotations

import json
import stat

import pytest

from mlxchat import cli, paths
from mlxchat.tools.config import ServerConfig, import_servers, load_tools_config
from mlxchat.tools.errors import ToolsError

ENV = {"HOME": "/home/ada", "TOKEN": "s3cret", "EMPTY": ""}


def write(path, data) -> None:
    path.write_text(json.dumps(data))


def test_servers_are_read_with_their_variables_expanded(tmp_path):
    path = tmp_path / "mcp.json"
    write(path, {"mcpServers": {
        "fs": {"command": "npx", "args": ["-y", "server-fs", "${HOME}/notes"],
               "env": {"LEVEL": "${LEVEL:-info}", "KEY": "${EMPTY:-none}"}, "cwd": "${HOME}"},
        "web": {"url": "https://mcp.example/${TOKEN}", "headers": {"Authorization":
                                                                    "Bearer ${TOKEN}"}},
        "off": {"command": "x", "disabled": True}}})
    config = load_tools_config(path, environ=ENV)
    assert config.names == ["fs", "web"] and not config.problems
    fs, web = config.servers["fs"], config.servers["web"]
    assert fs.args == ("-y", "server-fs", "/home/ada/notes") and fs.cwd == "/home/ada"
    assert dict(fs.env) == {"LEVEL": "info", "KEY": "none"}
    assert web.kind == "http" and dict(web.headers) == {"Authorization": "Bearer s3cret"}
    assert "s3cret" not in fs.fingerprint() + web.describe().replace("s3cret", "")
    assert fs.fingerprint() != ServerConfig("fs", command="npx").fingerprint()


@pytest.mark.parametrize("entry, why", [
    ({"command": "x", "args": ["${NOPE}"]}, "${NOPE} is not set"),
    ({"command": "x", "url": "http://a"}, 'give either "command"'),
    ({"url": "ftp://a"}, '"url" must start with http'),
    ({"command": "x", "args": "no list"}, '"args" must be a list of strings'),
    ({"type": "sse", "url": "http://a"}, "the sse transport is not supported"),
    ("just text", "the entry must be an object"),
])
def test_a_bad_entry_is_kept_with_its_reason_and_the_others_still_work(tmp_path, entry, why):
    path = tmp_path / "mcp.json"
    write(path, {"mcpServers": {"bad": entry, "good": {"command": "ok"}}})
    config = load_tools_config(path, environ=ENV)
    assert list(config.servers) == ["good"] and why in config.problems["bad"]


def test_a_broken_file_is_one_line(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text("{not json")
    config = load_tools_config(path)
    assert config.error.startswith(f"{path}: not valid JSON") and not config.servers
    write(path, {"servers": []})
    assert '"mcpServers" must be an object' in load_tools_config(path).error


CLAUDE = {"mcpServers": {"filesystem": {"command": "npx", "args": [
    "-y", "@modelcontextprotocol/server-filesystem", "/Users/ada/Desktop"]},
    "my github": {"command": "docker", "args": ["run", "-i", "ghcr.io/github/github-mcp"],
                  "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}}},
    "globalShortcut": "Ctrl+Space"}
CURSOR = {"mcpServers": {"docs": {"url": "https://docs.example/mcp",
                                  "headers": {"API_KEY": "${DOCS_KEY}"}}}}
VSCODE = {"servers": {"time": {"type": "stdio", "command": "uvx",
                               "args": ["mcp-server-time"]},
                      "old": {"type": "sse", "url": "http://127.0.0.1:9/sse"}}}


def test_import_reads_claude_desktop_cursor_lm_studio_and_vs_code_files(tmp_path):
    target = tmp_path / "config" / "mcp.json"
    sources = {}
    for name, data in (("claude", CLAUDE), ("cursor", CURSOR), ("vscode", VSCODE)):
        sources[name] = tmp_path / f"{name}.json"
        write(sources[name], data)
    report = import_servers(sources["claude"], target=target)
    assert report.added == ["filesystem", "my-github"]
    assert report.renamed == [("my github", "my-github")]
    report = import_servers(sources["cursor"], target=target)
    assert report.added == ["docs"]
    report = import_servers(sources["vscode"], target=target)
    assert report.added == ["time"] and report.skipped[0][0] == "old"
    saved = json.loads(target.read_text())["mcpServers"]
    assert saved["my-github"]["env"] == {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}  # kept unexpanded
    assert "type" not in saved["time"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    config = load_tools_config(target, environ={"GITHUB_TOKEN": "t", "DOCS_KEY": "k"})
    assert config.names == ["docs", "filesystem", "my-github", "time"] and not config.problems


def test_import_keeps_a_configured_server_unless_told_to_replace_it(tmp_path):
    target = tmp_path / "mcp.json"
    write(target, {"mcpServers": {"filesystem": {"command": "mine"}}, "other": 1})
    source = tmp_path / "claude.json"
    write(source, CLAUDE)
    report = import_servers(source, target=target)
    assert report.skipped[0][0] == "filesystem" and report.added == ["my-github"]
    assert json.loads(target.read_text())["mcpServers"]["filesystem"] == {"command": "mine"}
    report = import_servers(source, target=target, replace=True)
    assert report.replaced == ["filesystem"]
    assert json.loads(target.read_text())["other"] == 1  # the rest of the file stays
    with pytest.raises(ToolsError, match="not valid JSON"):
        (tmp_path / "bad.json").write_text("[")
        import_servers(tmp_path / "bad.json", target=target)


def test_the_command_line_imports_and_lists(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    source = tmp_path / "claude_desktop_config.json"
    write(source, CLAUDE)
    assert cli.main(["tools", "import", str(source)]) == 0
    out = capsys.readouterr().out
    assert "added filesystem; added my-github in" in out and str(paths.mcp_config_file()) in out
    assert cli.main(["tools", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["filesystem"]["state"] == "configured"
    assert rows["my-github"]["state"] == "failed"  # ${GITHUB_TOKEN} is not set here
    assert "GITHUB_TOKEN" in rows["my-github"]["why"]
    assert cli.main(["tools", "import", str(tmp_path / "missing.json")]) == 1
    assert "mlxchat: error:" in capsys.readouterr().err
