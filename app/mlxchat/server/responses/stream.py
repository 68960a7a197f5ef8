"""A Responses reply streamed as OpenAI's server-sent events: ``response.created``,
``response.in_progress``, then per output item ``response.output_item.added``,
its parts and deltas (``response.reasoning_summary_text.delta`` or
``response.reasoning_text.delta``, ``response.content_part.added`` and
``response.output_text.delta``, ``response.function_call_arguments.delta``), their
``...done`` events and ``response.output_item.done``; then
``response.completed`` (or ``response.incomplete``) with the whole response and
its usage. Every event carries its ``sequence_number``. A stream starts before
the prefill: ``response.in_progress`` repeats while the prompt is read. An
error after the status went out is ``response.failed``."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Awaitable, Callable

from mlxchat.server.core.errors import ApiError
from mlxchat.server.core.service import Finished, Piece
from mlxchat.server.core.streaming import Heartbeat, unsent
from mlxchat.server.responses.shape import ResponseShape

Kept = Callable[[Finished, dict[str, Any]], Awaitable[None]]
"""Stores a finished response (``store: true``) before its last event goes out."""


class _Events:
    """The events of one response, numbered, and the items sent so far."""

    def __init__(self, shape: ResponseShape):
        self.shape = shape
        self.seq = 0
        self.done: list[dict[str, Any]] = []
        self.open: str | None = None
        self.text = ""

    def event(self, name: str, body: dict[str, Any]) -> str:
        data = {"type": name, "sequence_number": self.seq, **body}
        self.seq += 1
        return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"

    def _at(self) -> dict[str, Any]:
        return {"output_index": len(self.done)}

    def _part(self, item_id: str, **more: Any) -> dict[str, Any]:
        return {"item_id": item_id, **self._at(), **more}

    def start(self, part: str) -> str:
        out = self.stop() if self.open not in (None, part) else ""
        if self.open == part:
            return out
        self.open, self.text = part, ""
        shape = self.shape
        if part == "answer":
            out += self.event("response.output_item.added", {
                **self._at(), "item": shape.message_item("", status="in_progress")})
            return out + self.event("response.content_part.added", self._part(
                shape.message_id, content_index=0,
                part={"type": "output_text", "text": "", "annotations": []}))
        out += self.event("response.output_item.added", {
            **self._at(), "item": shape.reasoning_item("", status="in_progress")})
        if shape.request.summary:
            out += self.event("response.reasoning_summary_part.added", self._part(
                shape.reasoning_id, summary_index=0, part={"type": "summary_text", "text": ""}))
        return out

    def delta(self, part: str, text: str) -> str:
        out = self.start(part)
        self.text += text
        shape = self.shape
        if part == "answer":
            return out + self.event("response.output_text.delta", self._part(
                shape.message_id, content_index=0, delta=text, logprobs=[]))
        if shape.request.summary:
            return out + self.event("response.reasoning_summary_text.delta", self._part(
                shape.reasoning_id, summary_index=0, delta=text))
        return out + self.event("response.reasoning_text.delta", self._part(
            shape.reasoning_id, content_index=0, delta=text))

    def stop(self, status: str = "completed") -> str:
        shape, text, out = self.shape, self.text, ""
        if self.open == "answer":
            out += self.event("response.output_text.done", self._part(
                shape.message_id, content_index=0, text=text, logprobs=[]))
            out += self.event("response.content_part.done", self._part(
                shape.message_id, content_index=0,
                part={"type": "output_text", "text": text, "annotations": []}))
            item = shape.message_item(text, status=status)
        elif self.open == "reasoning":
            if shape.request.summary:
                out += self.event("response.reasoning_summary_text.done", self._part(
                    shape.reasoning_id, summary_index=0, text=text))
                out += self.event("response.reasoning_summary_part.done", self._part(
                    shape.reasoning_id, summary_index=0,
                    part={"type": "summary_text", "text": text}))
            else:
                out += self.event("response.reasoning_text.done", self._part(
                    shape.reasoning_id, content_index=0, text=text))
            item = shape.reasoning_item(text)
        else:
            return ""
        self.open = None
        out += self.event("response.output_item.done", {**self._at(), "item": item})
        self.done.append(item)
        return out

    def ending(self, end: Finished, sent: str) -> str:
        rest = unsent(end, sent)  # text held back at a call's markup
        out = self.delta("answer", rest) if rest else ""
        out += self.stop("incomplete" if end.finish_reason == "length" else "completed")
        for call in end.tool_calls:
            item = self.shape.call_item(call)
            out += self.event("response.output_item.added", {
                **self._at(), "item": self.shape.call_item(call, done=False)})
            out += self.event("response.function_call_arguments.delta", self._part(
                item["id"], delta=item["arguments"]))
            out += self.event("response.function_call_arguments.done", self._part(
                item["id"], arguments=item["arguments"], name=item["name"]))
            out += self.event("response.output_item.done", {**self._at(), "item": item})
            self.done.append(item)
        return out


async def stream_events(shape: ResponseShape, first: Any, items: AsyncIterator[Any],
                        kept: Kept) -> AsyncIterator[str]:
    """The response's events. The stream may start before the prefill ends
    (``first`` a ``Heartbeat`` or a ``Planned``): ``response.created`` and
    ``response.in_progress`` then, and ``response.in_progress`` again at each
    heartbeat while the prompt is read (a real event: Codex skips comment lines
    and gives up on a stream that stays silent)."""
    events = _Events(shape)
    yield events.event("response.created", {"response": shape.body("in_progress", [])})
    yield events.event("response.in_progress", {"response": shape.body("in_progress", [])})
    sent = ""
    try:
        item = first
        while not isinstance(item, Finished):
            if isinstance(item, Heartbeat):
                yield events.event("response.in_progress",
                                   {"response": shape.body("in_progress", events.done)})
            elif isinstance(item, Piece):
                if item.part != "reasoning":
                    sent += item.text
                yield events.delta("reasoning" if item.part == "reasoning" else "answer",
                                   item.text)
            item = await anext(items)
        yield events.ending(item, sent)
        body = shape.final(item, events.done)
        await kept(item, body)
        name = "response.completed" if body["status"] == "completed" else "response.incomplete"
        yield events.event(name, {"response": body})
    except ApiError as exc:  # after the status went out: said in the stream
        error = {"code": exc.code or "server_error", "message": exc.message}
        yield events.event("response.failed", {"response": shape.body(
            "failed", events.done, error=error)})
    finally:
        await items.aclose()  # type: ignore[attr-defined]
