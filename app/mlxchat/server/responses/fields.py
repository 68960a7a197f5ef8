"""Every field of a Responses request (as the ``openai`` SDK defines them),
and what ``POST /v1/responses`` does with it."""

from __future__ import annotations

from mlxchat.server.core.fields import FieldTable, Refused

RESPONSES = FieldTable(
    route="/v1/responses",
    served=("model", "input", "instructions", "stream", "store", "previous_response_id",
            "include", "tools", "tool_choice", "parallel_tool_calls", "reasoning", "text",
            "max_output_tokens", "temperature", "top_p", "metadata", "prompt_cache_key"),
    ignored={
        "client_metadata": "a client's notes about itself (Codex's ids); nothing reads them",
        "safety_identifier": "nothing here moderates requests",
        "service_tier": "there is one tier: this machine",
        "user": "the conversation is named by prompt_cache_key or X-Session",
        "prompt_cache_retention": "the KV cache is kept by the session store's own rules "
                                  "(serve --kv-budget)",
        "stream_options": "its one option obfuscates deltas against side channels a "
                          "loopback stream does not have",
        "max_tool_calls": "it bounds calls of built-in tools, which this server leaves out",
    },
    refused={
        "background": Refused("responses run while their request waits; ask without "
                              "'background'", inert=(None, False)),
        "conversation": Refused("continue a stored response with 'previous_response_id', "
                                "or send the whole input"),
        "prompt": Refused("reusable prompt templates are not kept here; send "
                          "'instructions' and 'input'"),
        "truncation": Refused("a conversation past the window is refused, never cut",
                              inert=(None, "disabled")),
        "top_logprobs": Refused("log-probabilities are not given on this route",
                                inert=(None, 0)),
    })
