"""The MCP server of bench/tools.py (the SDK's MCPServer over stdio): one
read-only tool that answers at once, so what is timed is the loop's own cost."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

app = MCPServer("mlxchat-bench")


@app.tool(description="Facts about a harbour", annotations=ToolAnnotations(read_only_hint=True))
def harbour(name: str) -> str:
    return (f"{name} harbour: 12 piers, boats of class B moor at pier 4 and pay 7 coins a "
            "night; the harbour master checks them at dawn.")


if __name__ == "__main__":
    app.run()
