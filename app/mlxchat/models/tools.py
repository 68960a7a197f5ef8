"""Tool-call markup in a reply, shown as a formatted block (name and
arguments) instead of raw tags. The markup and its parser are the ones
mlx-lm's tokenizer wrapper names for the model (``tool_call_start``,
``tool_call_end``, ``tool_parser``); running the tools is not done here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Any


def _calls(parsed: Any) -> list[ToolCall]:
    items = parsed if isinstance(parsed, list) else [parsed]
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError("not a tool call")
        args = item.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        out.append(ToolCall(item["name"], args))
    return out


def split_tool_calls(tokenizer: Any, text: str) -> list[str | ToolCall]:
    """``text`` as plain pieces and the tool calls between the tokenizer's
    markers; a call its parser cannot read stays plain text."""
    start = getattr(tokenizer, "tool_call_start", None)
    end = getattr(tokenizer, "tool_call_end", None)
    parser = getattr(tokenizer, "tool_parser", None)
    if not start or parser is None or start not in text:
        return [text] if text else []
    out: list[str | ToolCall] = []
    rest = text
    while start in rest:
        before, after = rest.split(start, 1)
        body, sep, rest = after.partition(end) if end else (after, "", "")
        if before:
            out.append(before)
        try:
            out.extend(_calls(parser(body, None)))
        except Exception:  # noqa: BLE001 - a half-written or malformed call
            out.append(start + body + sep)
    if rest:
        out.append(rest)
    return out


def as_markdown(pieces: list[str | ToolCall]) -> str:
    """Plain pieces as they are; each call as a heading line and its
    arguments as an indented JSON block."""
    parts = []
    for piece in pieces:
        if isinstance(piece, ToolCall):
            args = json.dumps(piece.arguments, indent=2, ensure_ascii=False)
            parts.append(f"\n\n**Tool call** `{piece.name}`\n\n```json\n{args}\n```\n\n")
        else:
            parts.append(piece)
    return "".join(parts).strip("\n") if any(isinstance(p, ToolCall) for p in pieces) \
        else "".join(parts)
