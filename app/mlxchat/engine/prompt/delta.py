"""What one message adds to the token sequence, rendered once and never again.

Real chat templates re-render history (Llama 3 stamps today's date, Qwen3
strips earlier reasoning, Mistral moves the system prompt to the newest user
turn), so rendering the whole conversation each turn changes tokens the KV
cache already holds. Here a new user message is rendered after a fixed stub
exchange (twice, with two stub replies that end differently), and only the
tokens after the reply are kept: the template's own closing of the previous
reply, the user turn and the generation prompt.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from mlxchat.chat import ImageRef, Message
from mlxchat.engine.events import EngineError
from mlxchat.engine.prompt.jinja import SessionClock
from mlxchat.engine.prompt.render import GENERIC_TOOLS, render

_STUB_USER = "Stub question for the token ledger."
# Two replies that end in different tokens: their renders share only the closing.
_STUB_REPLIES = ("First stub answer, one.", "Another reply 2")


class TemplateNotIncremental(EngineError):
    """The template renders an earlier turn differently once a message follows it."""


@dataclass(frozen=True)
class TemplateOptions:
    """What a session fixes for every render of its template."""

    date: float | None = None
    """Unix time whose date templates stamp (Llama 3): the session's start."""
    enable_thinking: bool | None = None
    """Passed to templates that take it (Qwen3); None keeps the template's default."""
    reasoning_effort: str | None = None
    """'low', 'medium' or 'high' for templates that take it (gpt-oss)."""
    tools: str | None = field(default=None, repr=False)
    """Canonical JSON of the tool definitions passed to the template as ``tools``
    (left out of the repr so keys without tools stay as they were)."""
    generic_tools: bool = field(default=False, repr=False)
    """A template with no place for tools gets them in the generic tool prompt
    (``models.tool_prompt``); else it renders as it would without them."""

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.date is not None:
            day = dt.datetime.fromtimestamp(self.date)
            out["date_string"] = day.strftime("%d %b %Y")
            out["strftime_now"] = SessionClock(self.date)  # a template global, see prompt/jinja.py
        if self.enable_thinking is not None:
            out["enable_thinking"] = self.enable_thinking
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        if self.tools:
            out["tools"] = json.loads(self.tools)
            if self.generic_tools:
                out[GENERIC_TOOLS] = True
        return out


def _special_ids(tokenizer: Any) -> frozenset[int]:
    ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
    ids.update(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    return frozenset(int(i) for i in ids)


def _stub(reply: str) -> list[Message]:
    return [Message("user", _STUB_USER), Message("assistant", reply)]


def head(tokenizer: Any, system: str | None, text: str, options: TemplateOptions,
         images: Sequence[ImageRef] = ()) -> list[int]:
    """The first user message: everything the template puts before the reply
    (begin-of-text, system block, the message, the generation prompt)."""
    return turn_head(tokenizer, system, [Message("user", text, images=tuple(images))], options)


def turn_head(tokenizer: Any, system: str | None, messages: Sequence[Message],
              options: TemplateOptions) -> list[int]:
    """The same for the first turn's messages (a user message, and system
    messages that stand beside it)."""
    return render(tokenizer, ([Message("system", system)] if system else []) + list(messages),
                  **options.kwargs())


def follow_up(tokenizer: Any, text: str, *, previous: Sequence[int],
              options: TemplateOptions, images: Sequence[ImageRef] = ()) -> list[int]:
    """A user message after a reply whose token ids are ``previous``: what the
    template puts after a reply's text once another message follows it (its
    closing, which may differ from a final reply's: gpt-oss ends that one with
    ``<|return|>``), the user turn and the generation prompt; less the closing's
    end token when the model generated its own."""
    return turn_after(tokenizer, [Message("user", text, images=tuple(images))],
                      previous=previous, options=options)


def turn_after(tokenizer: Any, messages: Sequence[Message], *, previous: Sequence[int],
               options: TemplateOptions) -> list[int]:
    """The same for a turn's messages (a user message, and system messages
    that stand beside it, in order)."""
    kwargs = options.kwargs()
    a, b = (render(tokenizer, _stub(reply) + list(messages), **kwargs)
            for reply in _STUB_REPLIES)
    n = 0  # the two stub replies end differently: the shared tail starts right after them
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    tail = a[len(a) - n:]
    if n == 0 or n >= min(len(a), len(b)):
        raise TemplateNotIncremental("the chat template does not render a reply as written")
    return _after_reply(tokenizer, tail, previous)


def _after_reply(tokenizer: Any, tail: list[int], previous: Sequence[int]) -> list[int]:
    ended = bool(previous) and previous[-1] in set(tokenizer.eos_token_ids)
    if ended and tail[0] in _special_ids(tokenizer):
        tail = tail[1:]  # the generated end token stands for the template's
    return tail


def _variants(reply: Message) -> list[Message]:
    """Two forms of ``reply`` that end differently: its last call's arguments
    (the text a call ends with), or, without calls, the stub replies."""
    if not reply.tool_calls:
        return [Message("assistant", text) for text in _STUB_REPLIES]
    *calls, last = reply.tool_calls
    return [dataclasses.replace(reply, tool_calls=(*calls, dataclasses.replace(
        last, arguments={"stub": n}))) for n in (1, 2)]


def tool_results(tokenizer: Any, results: Sequence[Message], *, reply: Message,
                 previous: Sequence[int], options: TemplateOptions) -> list[int]:
    """Tool results after ``reply`` (the message that called the tools; its
    token ids are ``previous``): the reply's closing, the results as the
    template writes them (each family its own way) and the generation prompt.

    As for a user message, the exchange is rendered twice with replies that
    end differently; the shared tail starts inside the reply, and its first
    end token (one the model stops at) is the reply's closing."""
    kwargs = options.kwargs()
    stub = Message("user", _STUB_USER)
    a, b = (render(tokenizer, [stub, variant, *results], **kwargs)
            for variant in _variants(reply))
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    shared = a[len(a) - n:]
    ends = set(tokenizer.eos_token_ids)
    close = next((i for i, t in enumerate(shared) if t in ends), None)
    if close is None:
        specials = _special_ids(tokenizer)
        close = next((i for i, t in enumerate(shared) if t in specials), None)
    if close is None or n >= min(len(a), len(b)):
        raise TemplateNotIncremental("the chat template does not close a reply before "
                                     "tool results with a control token")
    return _after_reply(tokenizer, shared[close:], previous)


def opened_reply(tokenizer: Any, text: str, options: TemplateOptions) -> tuple[int, list[int]]:
    """A reply the request begins with ``text``, after a message whose ids end
    with the generation prompt: how many of those last ids it replaces (a
    generation prompt the template does not write before a written reply)
    and the ids it adds, as the template renders the reply left open."""
    kwargs = options.kwargs()
    stub = Message("user", _STUB_USER)
    prompt = render(tokenizer, [stub], **kwargs)
    opened = render(tokenizer, [stub, Message("assistant", text)], generation_prompt=False,
                    open_last=True, **kwargs)
    n = 0
    while n < min(len(prompt), len(opened)) and prompt[n] == opened[n]:
        n += 1
    if n == 0:
        raise TemplateNotIncremental("the chat template renders a reply the request begins "
                                     "apart from its conversation")
    return len(prompt) - n, opened[n:]
