"""mcp.json is read again when it changed: `mlxchat tools import` in another
shell while the app runs, seen by the next /tools and the next turn that uses
tools; a server whose entry changed restarts under its new entry, the others
keep running."""

from __future__ import annotations

import json
from dataclasses import replace

from mlxchat import paths
from mlxchat.commands import CommandContext, default_registry
from mlxchat.session.root import default_tool_host, open_conversation
from mlxchat.store import open_store
from mlxchat.tools.config import import_servers, load_tools_config
from mlxchat.tools.host import ToolHost

from tests.server.conftest import tiny_settings
from tests.tools.servers import entry


def write_mcp(servers: dict) -> None:
    paths.ensure_private_dir(paths.config_dir())
    paths.mcp_config_file().write_text(json.dumps({"mcpServers": servers}))


def test_tools_sees_a_server_imported_after_the_app_started(tiny, tmp_path):
    host = default_tool_host()  # mcp.json does not exist yet
    settings = tiny_settings(8)
    conv = open_conversation(settings, store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: tiny,
                             tool_host=host).conversation
    registry, ctx = default_registry(), CommandContext(conv, interactive=False)
    try:
        assert registry.run("/tools", ctx).text.startswith("No MCP server is configured")
        markers = tmp_path / "markers"
        markers.mkdir()
        claude = tmp_path / "claude_desktop_config.json"  # as another shell imports it
        claude.write_text(json.dumps({"mcpServers": {"t": entry(markers)}}))
        assert import_servers(claude).added == ["t"]
        listed = registry.run("/tools", ctx)
        assert listed.kind == "markdown", listed.text
        assert "- **t** ready" in listed.text
        assert registry.run("/tools on t.get_weather", ctx).text.startswith(
            "Tools for this session: t.get_weather")
    finally:
        conv.shutdown()
        host.close()


def test_a_turn_that_uses_tools_reads_the_changed_file(tiny, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    write_mcp({"t": {"command": str(tmp_path / "not-a-program")}})
    host = default_tool_host()
    settings = tiny_settings(8)
    settings.generation = replace(settings.generation, tools="t")
    conv = open_conversation(settings, store_factory=lambda: open_store(tmp_path / "s.db"),
                             load_model=lambda spec, progress=None: tiny,
                             tool_host=host).conversation
    try:
        conv.tools.ready()
        assert [s.state for s in host.statuses()] == ["failed"]
        write_mcp({"t": entry(markers)})  # fixed in the file while the session is open
        conv.tools.ready()  # what the app does before each message with tools
        assert [s.state for s in host.statuses()] == ["ready"]
        assert "get_weather" in conv.tools.named()
    finally:
        conv.shutdown()
        host.close()


def test_refresh_restarts_only_the_servers_whose_entry_changed(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    write_mcp({"a": entry(markers), "b": entry(markers)})
    host = ToolHost(load_tools_config(), log_dir=tmp_path / "logs")
    try:
        assert host.refresh() is False  # the file did not change
        host.start(["a", "b"])
        host.wait(["a", "b"], timeout_s=60)
        assert [s.state for s in host.statuses()] == ["ready", "ready"]
        write_mcp({"a": entry(markers), "b": entry(markers, env={"CHANGED": "1"}),
                   "c": entry(markers)})
        assert host.refresh() is True
        assert {s.name: s.state for s in host.statuses()} == {
            "a": "ready", "b": "not started", "c": "not started"}
        assert dict(host.config.servers["b"].env) == {"CHANGED": "1"}
        assert host.refresh() is False
        host.start(["b"])
        host.wait(["b"], timeout_s=60)
        assert host.call("b", "get_weather", {"city": "Oslo"}, timeout_s=30).text \
            == "Sunny in Oslo, 21 C"
    finally:
        host.close()
