"""Tool calls in a reply, as OpenAI's API shows them: the model's own markup
(read with ``models.tools``, gpt-oss's harmony calls too) becomes
``tool_calls`` with an id, type ``function``, the name and the arguments as a
JSON string; the text around the calls stays the reply's content."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

from mlxchat.chat import CalledTool
from mlxchat.models.tools import CallMarkup, ToolCall, partial_marker, split_tool_calls


@dataclass
class ReplyParts:
    """A reply's text apart from its tool calls."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)


def reply_parts(tokenizer: Any, text: str, *, tools: bool) -> ReplyParts:
    """``text`` split into content and calls (only when the request gave tools).
    The content is kept as written, not stripped: a stream sends the text before
    a call as it comes, and what the client sends back must hash like the
    stored reply."""
    if not tools:
        return ReplyParts(text)
    pieces = split_tool_calls(tokenizer, text)
    calls = [p for p in pieces if isinstance(p, ToolCall)]
    return ReplyParts("".join(p for p in pieces if isinstance(p, str)), calls)


def with_ids(calls: list[ToolCall]) -> tuple[CalledTool, ...]:
    """A reply's calls with the ids the client gets (and the store keeps): the
    one the model wrote, else a new one."""
    return tuple(CalledTool(c.name, c.arguments, c.id or f"call_{uuid.uuid4().hex[:24]}")
                 for c in calls)


def calls_signature(calls: Sequence[ToolCall | CalledTool]) -> str:
    """The calls as ``requests.tool_signature`` reads them back from a client."""
    if not calls:
        return ""
    return json.dumps([[c.name, c.arguments] for c in calls], sort_keys=True,
                      ensure_ascii=False)


def openai_calls(calls: Sequence[CalledTool], *, streamed: bool = False
                 ) -> list[dict[str, Any]]:
    """OpenAI's shape: arguments as a JSON string."""
    out = []
    for i, call in enumerate(calls):
        args = call.arguments if isinstance(call.arguments, str) \
            else json.dumps(call.arguments, ensure_ascii=False)
        item: dict[str, Any] = {"id": call.id, "type": "function",
                                "function": {"name": call.name, "arguments": args}}
        out.append({"index": i, **item} if streamed else item)
    return out


def ollama_calls(calls: Sequence[CalledTool]) -> list[dict[str, Any]]:
    """Ollama's shape: arguments as an object (text the model wrote that is
    not JSON stays a string)."""
    return [{"id": call.id, "function": {"index": i, "name": call.name,
                                         "arguments": call.arguments}}
            for i, call in enumerate(calls)]


class CallCut:
    """Streamed answer text up to the first call's markup: text that may begin
    the start marker is held back; from the marker on nothing more is sent
    (the calls go out whole at the end)."""

    def __init__(self, markup: CallMarkup | None):
        self.start = markup.start if markup else None
        self.held = ""
        self.cut = False

    def feed(self, text: str) -> str:
        if self.start is None:
            return text
        if self.cut:
            return ""
        self.held += text
        at = self.held.find(self.start)
        if at >= 0:
            self.cut = True
            out, self.held = self.held[:at], ""
            return out
        keep = partial_marker(self.held, self.start)
        out, self.held = self.held[:len(self.held) - keep], self.held[len(self.held) - keep:]
        return out
