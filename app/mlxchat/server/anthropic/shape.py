"""A Messages API reply in Anthropic's shape: the message with its content
blocks (thinking, text, tool_use), its stop reason and its usage from the
token ledger."""

from __future__ import annotations

import uuid
from typing import Any

from mlxchat.server.core.service import Finished, Planned
from mlxchat.server.core.usage import window_fields
from mlxchat.turn_stats import TurnStats

STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}


def stop_reason(end: Finished) -> str:
    """Anthropic's name for why the reply ended."""
    if end.stop_sequence is not None:
        return "stop_sequence"
    if end.finish_reason == "length" and end.stats.window_full:
        return "model_context_window_exceeded"
    return STOP_REASONS.get(end.finish_reason, "end_turn")


def usage(stats: TurnStats) -> dict[str, int]:
    """From the ledger: ``input_tokens`` the prompt's tokens this turn computed,
    ``cache_read_input_tokens`` those the KV cache held (warm, or back from its
    files); nothing is written to a cache apart (every turn's KV is kept)."""
    return {"input_tokens": stats.prompt_tokens - stats.reused_tokens,
            "cache_read_input_tokens": stats.reused_tokens,
            "cache_creation_input_tokens": 0,
            "output_tokens": stats.generated_tokens}


def tool_use_blocks(end: Finished) -> list[dict[str, Any]]:
    """The reply's calls; arguments the model wrote that are not a JSON object
    are given as ``{"arguments": TEXT}`` (Anthropic's input is an object)."""
    return [{"type": "tool_use", "id": call.id, "name": call.name,
             "input": call.arguments if isinstance(call.arguments, dict)
             else {"arguments": call.arguments}} for call in end.tool_calls]


class MessageShape:
    """The id, model and figures every part of one reply carries."""

    def __init__(self, model: str, *, omit_thinking: bool = False):
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self.model = model
        self.omit_thinking = omit_thinking
        """``thinking.display`` omitted: thinking blocks come with no text."""

    def message(self, end: Finished | None, planned: Any = None) -> dict[str, Any]:
        """The whole message (``end`` None: as a stream's ``message_start`` has
        it, with the prompt's usage as ``planned`` says it, when it is a ``Planned``)."""
        start = TurnStats()
        if isinstance(planned, Planned):
            start.prompt_tokens, start.reused_tokens = planned.prompt_tokens, planned.reused_tokens
        body: dict[str, Any] = {"id": self.id, "type": "message", "role": "assistant",
                                "model": self.model, "content": [], "stop_reason": None,
                                "stop_sequence": None, "usage": usage(start)}
        if end is None:
            return body
        if end.reasoning:
            body["content"].append({"type": "thinking", "signature": "",
                                    "thinking": "" if self.omit_thinking else end.reasoning})
        if end.content:
            body["content"].append({"type": "text", "text": end.content})
        body["content"] += tool_use_blocks(end)
        body.update(stop_reason=stop_reason(end), stop_sequence=end.stop_sequence,
                    usage=usage(end.stats), **window_fields(end))
        return body
