"""Every field of OpenAI's chat and legacy completion requests (as the
``openai`` SDK defines them), and what each route does with it."""

from __future__ import annotations

from mlxchat.server.core.fields import FieldTable, Refused

_NO_STORE = "every request is computed here and nothing is sent anywhere"

CHAT = FieldTable(
    route="/v1/chat/completions",
    served=("messages", "model", "frequency_penalty", "logit_bias", "logprobs",
            "max_completion_tokens", "max_tokens", "n", "presence_penalty",
            "reasoning_effort", "response_format", "seed", "stop", "stream",
            "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p",
            "user", "top_k", "parallel_tool_calls"),
    ignored={
        "metadata": "tags for OpenAI's dashboard; " + _NO_STORE,
        "store": "every conversation is stored as a session anyway (the product keeps "
                 "its KV cache between requests); `store: false` does not stop that",
        "service_tier": "there is one tier: this machine",
        "prompt_cache_key": "each conversation's KV cache is kept and found by its "
                            "messages, whatever the key",
        "prompt_cache_retention": "the KV cache is kept by the session store's own rules "
                                  "(serve --kv-budget)",
        "prompt_cache_options": "the same",
        "safety_identifier": "nothing here moderates requests",
    },
    refused={
        "audio": Refused("replies are text only"),
        "modalities": Refused("replies are text only", inert=(None, ["text"])),
        "prediction": Refused("predicted outputs are not used to speed up decoding"),
        "web_search_options": Refused("the model has no web search"),
        "functions": Refused("the deprecated 'functions' are not read; send 'tools'",
                             inert=(None, [])),
        "function_call": Refused("the deprecated 'function_call' is not read; send "
                                 "'tool_choice'", inert=(None, "auto", "none")),
        "verbosity": Refused("the reply's length is not steered by a verbosity level",
                             inert=(None, "medium")),
        "moderation": Refused("nothing here moderates requests"),
    })

COMPLETIONS = FieldTable(
    route="/v1/completions",
    served=("model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias",
            "logprobs", "max_tokens", "n", "presence_penalty", "response_format", "seed",
            "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "top_k"),
    ignored={
        "user": "a completion belongs to no session and is stored nowhere",
        "metadata": "tags for OpenAI's dashboard; " + _NO_STORE,
        "service_tier": "there is one tier: this machine",
    })
