"""Tool-call markup in a reply is shown as a block with the tool's name and
arguments, read with the parser mlx-lm names for the model's template."""

from __future__ import annotations

import dataclasses
import json

from mlxchat.chat import GenerationSettings, Message
from mlxchat.config import Settings
from mlxchat.session import Conversation
from mlxchat.engine import ChatEngine
from mlxchat.models import tools
from mlxchat.models.loader import load_folder
from mlxchat.store import open_store
from mlxchat.tui.widgets import AssistantMessage, Transcript

from tests.tui.tui_hosts import HostApp

from . import templates
from .builders import FAMILIES, write_family_model

# Qwen3's real template names its tool-call format like this (json_tools).
WITH_TOOLS = templates.QWEN3 + (
    "{%- if tools %}{%- for tool_call in tools %}"
    "{{- '<tool_call>' + tool_call.name + '</tool_call>' }}{%- endfor %}{%- endif %}")
CALL = {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}
REPLY = f"Let me check.<tool_call>\n{json.dumps(CALL)}\n</tool_call>"


def conversation(tmp_path) -> Conversation:
    qwen3 = next(f for f in FAMILIES if f.name == "qwen3")
    fam = dataclasses.replace(qwen3, template=WITH_TOOLS)
    loaded = load_folder(write_family_model(fam, tmp_path / "m"))
    return Conversation(settings=Settings(generation=GenerationSettings(max_tokens=2)),
                        store=open_store(tmp_path / "s.db"), engine=ChatEngine(loaded),
                        model_spec="tiny")


def test_tool_calls_are_parsed_with_the_model_parser(tmp_path):
    conv = conversation(tmp_path)
    tok = conv.engine.loaded.tokenizer
    assert tok.tool_call_start == "<tool_call>"
    pieces = tools.split_tool_calls(tok, REPLY)
    assert pieces == ["Let me check.", tools.ToolCall("get_weather", CALL["arguments"])]
    shown = conv.display_text(REPLY)
    assert "<tool_call>" not in shown and "`get_weather`" in shown
    block = shown.split("```json\n")[1].split("\n```")[0]
    assert json.loads(block) == CALL["arguments"]
    # A call cut short (a stopped reply) stays as it was written.
    cut = REPLY[:-len("</tool_call>") - 5]
    assert conv.display_text(cut) == cut
    assert conv.display_text("No tools here.") == "No tools here."
    conv.close()


async def test_the_transcript_shows_the_formatted_block(tmp_path):
    conv = conversation(tmp_path)
    app = HostApp(lambda: Transcript())
    async with app.run_test(size=(100, 30)) as pilot:
        transcript = app.query_one(Transcript)
        transcript.formatter = conv.display_text
        await transcript.load([Message("user", "Weather?"), Message("assistant", REPLY)])
        reply = await transcript.start_reply()
        await reply.append(REPLY)
        await reply.finish()
        await pilot.pause()
        stored, streamed = transcript.query(AssistantMessage)
        for message in (stored, streamed):
            assert message.text == REPLY  # the answer as sampled is kept
            assert message.markdown.source == conv.display_text(REPLY) != REPLY
    conv.close()
