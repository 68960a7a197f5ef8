"""The response object and its output items (``reasoning``, ``message``,
``function_call``) as OpenAI's Responses API writes them, for one reply."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from mlxchat.chat import CalledTool
from mlxchat.server.core.service import Finished
from mlxchat.server.responses.protocol import ResponsesRequest
from mlxchat.server.responses.sealed import seal
from mlxchat.turn_stats import TurnStats


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage(stats: TurnStats) -> dict[str, Any]:
    """What the turn cost; ``cached_tokens`` is what the saved KV supplied."""
    return {"input_tokens": stats.prompt_tokens,
            "input_tokens_details": {"cached_tokens": stats.reused_tokens},
            "output_tokens": stats.generated_tokens,
            "output_tokens_details": {"reasoning_tokens": stats.reasoning_tokens},
            "total_tokens": stats.prompt_tokens + stats.generated_tokens}


def status_of(end: Finished) -> tuple[str, dict[str, str] | None]:
    """``completed``, or ``incomplete`` with why (the reply hit its token limit)."""
    if end.finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


class ResponseShape:
    """One response: its id, its items' ids, and the request fields it repeats."""

    def __init__(self, request: ResponsesRequest, model: str, key: bytes):
        self.id = new_id("resp")
        self.created = int(time.time())
        self.request = request
        self.model = model
        self.key = key
        self.reasoning_id = new_id("rs")
        self.message_id = new_id("msg")

    def body(self, status: str, output: list[dict[str, Any]], *,
             stats: TurnStats | None = None, error: dict[str, Any] | None = None,
             incomplete: dict[str, str] | None = None) -> dict[str, Any]:
        return {"id": self.id, "object": "response", "created_at": self.created,
                "status": status, "background": False, "error": error,
                "incomplete_details": incomplete, "model": self.model, "output": output,
                "store": self.request.store, "usage": usage(stats) if stats else None,
                "user": None, **self.request.echo}

    def reasoning_item(self, text: str, *, status: str = "completed") -> dict[str, Any]:
        done = status != "in_progress"
        item: dict[str, Any] = {"type": "reasoning", "id": self.reasoning_id,
                                "summary": [], "status": status}
        if self.request.summary:
            item["summary"] = [{"type": "summary_text", "text": text}] if done else []
        else:
            item["content"] = [{"type": "reasoning_text", "text": text}] if done else []
        if done and self.request.sealed:
            item["encrypted_content"] = seal(self.key, text)
        return item

    def message_item(self, text: str, *, status: str = "completed") -> dict[str, Any]:
        done = status != "in_progress"
        content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        return {"type": "message", "id": self.message_id, "role": "assistant",
                "status": status, "content": content if done else []}

    def call_item(self, call: CalledTool, *, done: bool = True) -> dict[str, Any]:
        name, space = self.request.tools.call_name(call.name)
        args = call.arguments if isinstance(call.arguments, str) \
            else json.dumps(call.arguments, ensure_ascii=False)
        item = {"type": "function_call", "id": f"fc_{call.id.removeprefix('call_')}",
                "call_id": call.id, "name": name, "arguments": args if done else "",
                "status": "completed" if done else "in_progress"}
        if space is not None:
            item["namespace"] = space
        return item

    def output(self, end: Finished) -> list[dict[str, Any]]:
        """A whole reply's items."""
        status, _ = status_of(end)
        out = [self.reasoning_item(end.reasoning)] if end.reasoning else []
        if end.content:
            out.append(self.message_item(end.content, status=status))
        return out + [self.call_item(call) for call in end.tool_calls]

    def final(self, end: Finished, output: list[dict[str, Any]]) -> dict[str, Any]:
        status, why = status_of(end)
        return self.body(status, output, stats=end.stats, incomplete=why)
