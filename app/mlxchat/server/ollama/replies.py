"""Ollama's reply bodies for chat (``message``) and generate (``response``):
whole, or streamed as one JSON object a line, the last one done with
Ollama's counters (durations in nanoseconds, token counts)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, AsyncIterator

from mlxchat.chat import CalledTool
from mlxchat.engine.events import TokenLogprob
from mlxchat.server.core.errors import ApiError
from mlxchat.server.core.logprobs import TokenTexts, chat_content
from mlxchat.server.core.service import Finished, Piece
from mlxchat.server.core.streaming import unsent
from mlxchat.server.core.tool_calls import ollama_calls
from mlxchat.server.core.usage import capped_to, window_fields

NS = 1_000_000_000


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def counters(end: Finished, asked: int | None) -> dict[str, Any]:
    """The last line's figures; ``asked``: the num_predict given (None: -1/-2 or none)."""
    s = end.stats
    capped = capped_to(s, asked)  # num_predict past the window: says how far it went
    return {"done": True, **({} if capped is None else {"num_predict_capped_to": capped}),
            # Ollama says "stop" after tool calls too
            "done_reason": "stop" if end.tool_calls else end.finish_reason,
            "total_duration": int(s.total_s * NS), "load_duration": 0,
            "prompt_eval_count": s.prefilled_tokens, "prompt_eval_duration": int(s.ttft_s * NS),
            "eval_count": s.generated_tokens,
            "eval_duration": int(max(s.total_s - s.ttft_s, 0) * NS), **window_fields(end)}


class _Shape:
    def __init__(self, model: str, texts: TokenTexts | None = None):
        self.model = model
        self.texts = texts
        """The tokenizer's texts when log-probabilities are asked for, else None."""

    def logprobs(self, entries: tuple[TokenLogprob, ...] | None) -> dict[str, Any]:
        """Ollama's ``logprobs``: each token's, with its alternatives."""
        if self.texts is None:
            return {}
        return {"logprobs": chat_content(entries or (), self.texts)}


class ChatShape(_Shape):
    """``/api/chat``'s lines: an assistant ``message`` each."""

    def body(self, content: str, thinking: str = "",
             calls: tuple[CalledTool, ...] = ()) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if thinking:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = ollama_calls(calls)
        return {"model": self.model, "created_at": now(), "message": message, "done": False}


class GenerateShape(_Shape):
    """``/api/generate``'s lines: the ``response`` text (and ``thinking``)."""

    def body(self, content: str, thinking: str = "",
             calls: tuple[CalledTool, ...] = ()) -> dict[str, Any]:
        line: dict[str, Any] = {"model": self.model, "created_at": now(), "response": content,
                                "done": False}
        if thinking:
            line["thinking"] = thinking
        return line


Shape = ChatShape | GenerateShape


def whole(shape: Shape, end: Finished, asked: int | None) -> dict[str, Any]:
    """A reply asked for whole: one object."""
    return {**shape.body(end.content, end.reasoning, end.tool_calls),
            **shape.logprobs(end.logprobs), **counters(end, asked)}


def loaded(shape: Shape) -> dict[str, Any]:
    """The answer to a request that only loads the model (it is loaded)."""
    return {**shape.body(""), "done": True, "done_reason": "load"}


async def lines(shape: Shape, first: Piece | Finished, items: AsyncIterator[Piece | Finished],
                asked: int | None = None) -> AsyncIterator[str]:
    def line(body: dict[str, Any]) -> str:
        return json.dumps(body, ensure_ascii=False) + "\n"

    sent = ""
    try:
        item = first
        while not isinstance(item, Finished):
            if item.part == "reasoning":
                yield line(shape.body("", item.text))
            else:
                sent += item.text
                yield line({**shape.body(item.text), **shape.logprobs(item.logprobs)})
            item = await anext(items)
        rest = unsent(item, sent)
        if rest:  # held back at a call's markup
            yield line(shape.body(rest))
        if item.tool_calls:  # as Ollama streams them: one message before the last
            yield line(shape.body("", "", item.tool_calls))
        yield line({**shape.body(""), **counters(item, asked)})
    except ApiError as exc:  # after the status went out: said in the stream
        yield line({"error": exc.message})
    finally:
        await items.aclose()  # type: ignore[attr-defined]
