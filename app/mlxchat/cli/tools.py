"""`mlxchat tools ...`: import the MCP servers of a Claude Desktop, Cursor,
LM Studio or VS Code file into mcp.json, and list the configured servers
(``--check`` starts each and lists its tools; no tool runs)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_tools_parser(sub) -> None:
    p = sub.add_parser("tools", help="MCP servers whose tools the model may use",
                       description="MCP servers (mcp.json in the config folder).")
    ts = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    imp = ts.add_parser("import", help="add the servers of a Claude Desktop, Cursor, LM Studio "
                                       "or VS Code MCP file to mcp.json")
    imp.add_argument("path", help="e.g. ~/Library/Application Support/Claude/"
                                  "claude_desktop_config.json, ~/.cursor/mcp.json")
    imp.add_argument("--replace", action="store_true",
                     help="a server already configured under the same name takes the file's")
    ls = ts.add_parser("list", help="the configured servers (--check: start them, list tools)")
    ls.add_argument("--check", action="store_true",
                    help="start each server and list its tools (no tool runs)")
    ls.add_argument("--json", action="store_true")


def run_tools(args: argparse.Namespace) -> int:
    from mlxchat.tools.config import import_servers, load_tools_config

    if args.action == "import":
        report = import_servers(Path(args.path), replace=args.replace)
        for old, new in report.renamed:
            print(f"renamed {old!r} to {new!r} (names are letters, digits, '-' and '_')")
        for name, why in report.skipped:
            print(f"skipped {name}: {why}")
        done = [f"added {n}" for n in report.added] + [f"replaced {n}" for n in report.replaced]
        print(("; ".join(done) + f" in {report.target}") if done else
              f"nothing added to {report.target}")
        return 0 if done or not report.skipped else 1
    config = load_tools_config()
    if config.error:
        print(f"mlxchat: error: {config.error}", file=sys.stderr)
        return 1
    statuses = _check(config) if args.check else None
    rows = []
    for name in config.names:
        server = config.servers.get(name)
        status = next((s for s in statuses or () if s.name == name), None)
        rows.append({"name": name, "kind": server.kind if server else None,
                     "runs": server.describe() if server else None,
                     "state": status.state if status else ("configured" if server else "failed"),
                     "why": (status.why if status else config.problems.get(name, "")) or None,
                     "tools": [{"name": t.name, "description": t.description,
                                "hints": t.hints()} for t in status.tools] if status else None})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no MCP servers in {config.path} (mlxchat tools import FILE adds them)")
    for row in rows:
        why = f": {row['why']}" if row["why"] else ""
        print(f"{row['name']}  {row['state']}{why}  {row['runs'] or ''}".rstrip())
        for tool in row["tools"] or ():
            hints = f" [{', '.join(tool['hints'])}]" if tool["hints"] else ""
            print(f"  {tool['name']}{hints}  {tool['description'].splitlines()[0][:80]}"
                  if tool["description"] else f"  {tool['name']}{hints}")
    return 0


def _check(config):
    from mlxchat.tools.host import ToolHost

    host = ToolHost(config)
    try:
        host.start(config.servers)
        host.wait(config.servers)
        return host.statuses()
    finally:
        host.close()
