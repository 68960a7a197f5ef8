"""Every field a client may send is served, or refused in words: each
route's table (``fields``) refuses by name what asks for something this
server does not do, accepts what changes nothing here, lets a vendor's
extras through; a streamed tool call opens with ``content: null``; a
``suffix`` fills in the middle where the tokenizer can, else says why."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from openai import OpenAI

from mlxchat.models import load_folder
from mlxchat.server.anthropic.fields import MESSAGES
from mlxchat.server.openai.fields import CHAT, COMPLETIONS
from mlxchat.server.responses.fields import RESPONSES
from tests.families.builders import with_template, write_family_model
from tests.server.conftest import real_qwen3, request, serve
from tests.server.test_tool_choice import CITY

ASK = [{"role": "user", "content": "Hello"}]
DOCS = Path(__file__).parents[2] / "docs" / "server.md"
BASES = {CHAT.route: {"model": "tiny", "messages": ASK, "max_tokens": 2},
         COMPLETIONS.route: {"model": "tiny", "prompt": "Hello", "max_tokens": 2},
         MESSAGES.route: {"model": "tiny", "messages": ASK, "max_tokens": 2},
         RESPONSES.route: {"model": "tiny", "input": "Hello", "max_output_tokens": 2}}
TABLES = [CHAT, COMPLETIONS, MESSAGES, RESPONSES]
ASKING = {"audio": {"voice": "alloy", "format": "mp3"}, "modalities": ["text", "audio"],
          "prediction": {"type": "content", "content": "x"}, "web_search_options": {},
          "functions": [{"name": "f"}], "function_call": {"name": "f"}, "verbosity": "low",
          "moderation": {"mode": "block"},
          "container": "c1", "mcp_servers": [{"type": "url", "url": "http://x"}],
          "background": True, "conversation": "conv_1", "prompt": {"id": "pmpt_1"},
          "truncation": "auto", "top_logprobs": 3}
"""A value of each refused field that asks for something."""


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.route)
def test_a_refused_field_is_a_400_naming_it(served, table):
    for name in table.refused:
        reply = request(served.url, "POST", table.route,
                        {**BASES[table.route], name: ASKING[name]})
        assert reply.status == 400, name
        body = reply.json()
        error = body["error"]
        assert name in error["message"], error
        if table is not MESSAGES:
            assert error["param"] == name


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.route)
def test_ignored_defaults_and_extras_are_accepted(served, table):
    values = {"metadata": {"k": "v"}, "store": False, "service_tier": "auto",
              "prompt_cache_key": "k", "prompt_cache_retention": "24h",
              "prompt_cache_options": {}, "safety_identifier": "s", "user": "someone",
              "cache_control": {"type": "ephemeral"}, "inference_geo": "us",
              "speed": "fast", "user_profile_id": "u", "workspace_id": "w",
              "diagnostics": {"previous_message_id": "m"}, "client_metadata": {"k": "v"},
              "stream_options": {"include_obfuscation": False}, "max_tool_calls": 3,
              "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}
    body = {**BASES[table.route], **{k: values[k] for k in table.ignored},
            # A vendor's extra, and refused fields given what asks for nothing.
            "some_vendor_extra": {"x": 1},
            **{k: v for k, v in (("modalities", ["text"]),)
               if k in table.refused}}
    reply = request(served.url, "POST", table.route, body)
    assert reply.status == 200, reply.body


def test_the_docs_name_every_field_of_every_table():
    text = DOCS.read_text()
    for table in TABLES:
        for name in table.names():
            assert re.search(rf"`{re.escape(name)}`", text), (table.route, name)


def test_a_streamed_tool_call_opens_with_null_content(tmp_path_factory, tmp_path):
    running = serve(real_qwen3(tmp_path_factory.mktemp("qwen3")), tmp_path / "s.db",
                    max_tokens=300)
    try:
        reply = request(running.url, "POST", "/v1/chat/completions", {
            "model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                                                        "parameters": CITY}}],
            "stream": True, "temperature": 1.0, "seed": 5,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
        chunks = [json.loads(line[6:]) for line in reply.lines()
                  if line.startswith("data: {")]
        first = chunks[0]["choices"][0]["delta"]
        assert first == {"role": "assistant", "content": None}
        assert any("tool_calls" in c["choices"][0]["delta"] for c in chunks if c["choices"])
    finally:
        running.stop()


FIM = ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")


def test_suffix_fills_in_the_middle_where_the_tokenizer_can(served, tmp_path_factory,
                                                            tmp_path):
    refused = request(served.url, "POST", "/v1/completions",
                      {"model": "tiny", "prompt": "def f(", "suffix": "    return x"})
    assert refused.status == 400 and refused.json()["error"]["param"] == "suffix"
    assert "fill-in-the-middle" in refused.json()["error"]["message"]
    base = with_template("llama3", "{{ messages[0]['content'] }}")
    family = with_template("llama3", base.template, specials=base.specials + FIM)
    coder = load_folder(write_family_model(family, tmp_path_factory.mktemp("fim")),
                        name="tiny", spec="tiny")
    running = serve(coder, tmp_path / "fim.db")
    try:
        api = OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0)
        reply = api.completions.create(model="tiny", prompt="def f(", suffix="    return x",
                                       max_tokens=3, temperature=0, logprobs=0)
        vocab = coder.tokenizer.get_vocab()
        prefix_ids = [vocab[FIM[0]], *coder.tokenizer.encode("def f(", add_special_tokens=False)]
        assert reply.usage.prompt_tokens == len(prefix_ids) + 1 + len(
            coder.tokenizer.encode("    return x", add_special_tokens=False)) + 1
        assert reply.choices[0].text
    finally:
        running.stop()
