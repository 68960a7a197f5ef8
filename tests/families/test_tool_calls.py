"""Tool-call markup in a reply is shown as a block with the tool's name and
arguments, read with the parser mlx-lm names for the model's template."""

from __future__ import annotations

import dataclasses
import json

from mlxchat.chat import Message
from mlxchat.config import Settings
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TextDelta
from mlxchat.generation import GenerationSettings
from mlxchat.models import load_folder, tools
from mlxchat.session.conversation import Conversation
from mlxchat.store import open_store
from mlxchat.tui.widgets import AssistantMessage, Transcript

from . import templates
from .builders import FAMILIES, write_family_model
from tests.tui.tui_hosts import HostApp

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
    shown = conv.views.display_text(REPLY)
    assert "<tool_call>" not in shown and "`get_weather`" in shown
    block = shown.split("```json\n")[1].split("\n```")[0]
    assert json.loads(block) == CALL["arguments"]
    # A call cut short (a stopped reply) stays as it was written.
    cut = REPLY[:-len("</tool_call>") - 5]
    assert conv.views.display_text(cut) == cut
    assert conv.views.display_text("No tools here.") == "No tools here."
    conv.close()


async def test_the_transcript_shows_the_formatted_block(tmp_path):
    conv = conversation(tmp_path)
    app = HostApp(lambda: Transcript())
    async with app.run_test(size=(100, 30)) as pilot:
        transcript = app.query_one(Transcript)
        transcript.formatter = conv.views.display_text
        await transcript.load([Message("user", "Weather?"), Message("assistant", REPLY)])
        reply = await transcript.start_reply()
        await reply.append(REPLY)
        await reply.finish()
        await pilot.pause()
        stored, streamed = transcript.query(AssistantMessage)
        for message in (stored, streamed):
            assert message.text == REPLY  # the answer as sampled is kept
            assert message.markdown.source == conv.views.display_text(REPLY) != REPLY
    conv.close()


async def test_a_streaming_call_shows_as_a_block_once_complete(tmp_path, monkeypatch):
    """The reply's Markdown only grows while it streams: text at once, a call's
    markup never, its block as soon as the call is complete; nothing is
    rendered again at the end."""
    conv = conversation(tmp_path)
    text = REPLY + " Done."
    deltas = [TextDelta(text[i:i + 4], i // 4 + 1) for i in range(0, len(text), 4)]
    complete = next(n for n in range(len(text) + 1) if "</tool_call>" in text[:n])
    app = HostApp(lambda: Transcript())
    async with app.run_test(size=(100, 30)) as pilot:
        transcript = app.query_one(Transcript)
        transcript.formatter, transcript.reply_format = conv.views.display_text, conv.views.reply_stream
        reply = await transcript.start_reply()
        markdown = reply.message.markdown
        rerendered: list[str] = []
        update = markdown.update
        monkeypatch.setattr(markdown, "update", lambda md: rerendered.append(md) or update(md))
        shown, block_at, seen = "", None, 0
        for delta in deltas:
            await reply.append(delta.text, delta.part)
            await pilot.pause()
            seen += len(delta.text)
            source = markdown.source
            assert source.startswith(shown) and "tool_call>" not in source
            assert not source.endswith("<") and "<to" not in source  # a marker's start is held
            if block_at is None and "**Tool call** `get_weather`" in source:
                block_at = seen
            shown = source
        assert block_at is not None and block_at - 4 < complete <= block_at
        await reply.finish()
        await pilot.pause()
        assert rerendered == []
        assert markdown.source.strip("\n") == conv.views.display_text(text).strip("\n")
        assert "Let me check." in markdown.source and markdown.source.rstrip().endswith("Done.")
    conv.close()


def test_streamed_markdown_is_the_finished_markdown_at_any_chunking(tmp_path):
    conv = conversation(tmp_path)
    text = f"a < b <tool<{REPLY}<tool_call>not json</tool_call> then {REPLY}<tool_call>{{\"na"
    for size in range(1, 9):
        stream = conv.views.reply_stream()
        joined = "".join(stream.add(text[i:i + size]) for i in range(0, len(text), size))
        assert (joined + stream.finish()).strip("\n") == conv.views.display_text(text)
    conv.close()
