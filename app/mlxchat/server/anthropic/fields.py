"""Every field of Anthropic's Messages request (as the ``anthropic`` SDK
defines it), and what ``POST /v1/messages`` does with it."""

from __future__ import annotations

from mlxchat.server.core.fields import FieldTable, Refused


MESSAGES = FieldTable(
    route="/v1/messages",
    served=("model", "messages", "max_tokens", "system", "stop_sequences", "stream",
            "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking",
            "output_config", "output_format"),
    ignored={
        "metadata": "the caller's ids for Anthropic's records; nothing here reads them",
        "context_management": "edits of any type (Claude Code's clear old thinking): the "
                              "ledger keeps each reply as it was computed, so the "
                              "conversation's KV is reused whole",
        "cache_control": "every conversation's KV cache is kept whole anyway",
        "service_tier": "there is one tier: this machine",
        "inference_geo": "every request is computed on this machine",
        "speed": "there is one speed: this machine's",
        "user_profile_id": "there are no accounts here",
        "workspace_id": "there are no workspaces here",
        "diagnostics": "why a conversation's KV cache was recomputed is said by the "
                       "X-Cache-Miss header and usage's cache_miss_reason instead",
    },
    refused={
        "container": Refused("there are no code execution containers here"),
        "mcp_servers": Refused("the server calls no MCP servers for the model; send "
                               "'tools' and run them in the client", inert=(None, [])),
    })
