"""A Messages API reply streamed as Anthropic's server-sent events:
``message_start`` (sent once the prefill is planned, before it runs), ``ping``
(also while a long prompt is read), then per content block ``content_block_start``,
its deltas (``thinking_delta``, ``text_delta``, a tool's ``input_json_delta``)
and ``content_block_stop``; then ``message_delta`` (the stop reason and the
usage) and ``message_stop``. An error after the status went out is an
``error`` event."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

from mlxchat.server.anthropic.shape import MessageShape, stop_reason, tool_use_blocks, usage
from mlxchat.server.core.errors import ApiError
from mlxchat.server.core.service import Finished, Piece
from mlxchat.server.core.streaming import Heartbeat, unsent

BLOCKS = {"reasoning": ("thinking", "thinking_delta", "thinking"),
          "answer": ("text", "text_delta", "text")}
"""A piece's part: its block's type, its delta's type and the delta's field."""


def event(name: str, body: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps({'type': name, **body}, ensure_ascii=False)}\n\n"


class _Blocks:
    """The content blocks sent so far: the one open, and how many there were."""

    def __init__(self) -> None:
        self.count = 0
        self.open: str | None = None

    def start(self, block: dict[str, Any]) -> str:
        out = self.stop()
        self.open = block["type"]
        return out + event("content_block_start", {"index": self.count, "content_block": block})

    def stop(self) -> str:
        if self.open is None:
            return ""
        self.open = None
        self.count += 1
        return event("content_block_stop", {"index": self.count - 1})

    def delta(self, part: str, text: str) -> str:
        kind, delta, field = BLOCKS[part]
        out = ""
        if self.open != kind:
            empty = {"type": kind, kind: ""}
            if kind == "thinking":
                empty["signature"] = ""
            out = self.start(empty)
        return out + event("content_block_delta", {"index": self.count,
                                                   "delta": {"type": delta, field: text}})


def _ending(blocks: _Blocks, end: Finished, sent: str) -> str:
    out = ""
    rest = unsent(end, sent)  # text held back at a call's markup
    if rest:
        out += blocks.delta("answer", rest)
    for block in tool_use_blocks(end):
        out += blocks.start({**block, "input": {}})
        out += event("content_block_delta", {"index": blocks.count, "delta": {
            "type": "input_json_delta",
            "partial_json": json.dumps(block["input"], ensure_ascii=False)}})
    out += blocks.stop()
    out += event("message_delta", {
        "delta": {"stop_reason": stop_reason(end), "stop_sequence": end.stop_sequence},
        "usage": usage(end.stats)})
    return out + event("message_stop", {})


async def stream_events(shape: MessageShape, first: Any, items: AsyncIterator[Any], *,
                        omit_thinking: bool = False) -> AsyncIterator[str]:
    """The reply's events. The stream may start before the prefill ends:
    ``message_start`` once it is planned (with the prompt's usage), a comment
    line while the request waits before that, a ``ping`` while the prompt is
    read; ``message_delta`` carries the usage whole. ``omit_thinking``: a
    thinking block is sent with no text (``display: omitted``)."""
    blocks = _Blocks()
    sent = ""
    started = False
    try:
        item = first
        while not isinstance(item, Finished):
            if isinstance(item, Heartbeat):
                yield event("ping", {}) if started else ": waiting\n\n"
            elif not started:  # a Planned, or a first piece with nothing planned before it
                started = True
                yield event("message_start", {"message": shape.message(None, item)})
                yield event("ping", {})
            if isinstance(item, Piece):
                if item.part != "reasoning":
                    sent += item.text
                    yield blocks.delta("answer", item.text)
                elif not omit_thinking:
                    yield blocks.delta("reasoning", item.text)
                elif blocks.open != "thinking":
                    yield blocks.start({"type": "thinking", "thinking": "", "signature": ""})
            item = await anext(items)
        if not started:
            yield event("message_start", {"message": shape.message(None)})
        yield _ending(blocks, item, sent)
    except ApiError as exc:  # after the status went out: said in the stream
        yield event("error", {"error": exc.anthropic_body()["error"]})
    finally:
        await items.aclose()  # type: ignore[attr-defined]
