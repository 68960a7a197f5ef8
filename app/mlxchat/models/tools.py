"""Tool-call markup in a reply, shown as a formatted block (name and
arguments) instead of raw tags. The markup and its parser are the ones
mlx-lm's tokenizer wrapper names for the model (``tool_call_start``,
``tool_call_end``, ``tool_parser``), or, for gpt-oss, a message to a
recipient on the commentary channel, which the engine keeps in the reply's
text as gpt-oss's template writes a call (``models.markup.CALL_HEAD``), or,
for a template with no place for tools, the generic tool prompt's
``<tool_call>JSON</tool_call>`` (``models.tool_prompt``).
Running the tools is the session's (``session/tool_loop.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from mlxchat.models.markup import CALL_END, CALL_HEAD, cached_markup
from mlxchat.models import tool_prompt


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Any
    id: str | None = None
    """The call's id when the model writes one (Mistral's), else None."""


@dataclass(frozen=True)
class CallMarkup:
    """Where a call starts and ends in a reply's text, and how its body reads."""

    start: str
    end: str | None
    """None: a call runs to the end of the reply."""
    parse: Callable[[str], list[ToolCall]]
    """The calls of a body between the markers; raises on one it cannot read."""


def _calls(parsed: Any) -> list[ToolCall]:
    items = parsed if isinstance(parsed, list) else [parsed]
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError("not a tool call")
        call_id = item.get("id")
        out.append(ToolCall(item["name"], _arguments(item.get("arguments", {})),
                            call_id if isinstance(call_id, str) and call_id else None))
    return out


def _arguments(args: Any) -> Any:
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            pass
    return args


def _harmony_calls(body: str) -> list[ToolCall]:
    """'functions.NAME<|channel|>commentary json<|message|>ARGS' -> the call."""
    head, sep, args = body.partition("<|message|>")
    recipient = head.split("<|channel|>")[0].strip()
    if not sep or not recipient:
        raise ValueError("not a gpt-oss tool call")
    return [ToolCall(recipient.removeprefix("functions."), _arguments(args))]


def call_markup(tokenizer: Any) -> CallMarkup | None:
    """The tool-call markup of ``tokenizer``'s model, or None when it has none."""
    if cached_markup(tokenizer).kind == "harmony":
        return CallMarkup(CALL_HEAD, CALL_END, _harmony_calls)
    start = getattr(tokenizer, "tool_call_start", None)
    parser = getattr(tokenizer, "tool_parser", None)
    if not start or parser is None:
        if tool_prompt.renders_tools(tokenizer):
            return None
        # A template without tools: calls as the generic tool prompt asks for them.
        return CallMarkup(tool_prompt.CALL_START, tool_prompt.CALL_END,
                          lambda body: _calls(json.loads(body)))
    return CallMarkup(start, getattr(tokenizer, "tool_call_end", None) or None,
                      lambda body: _calls(parser(body, None)))


def _read_call(markup: CallMarkup, body: str, written: str) -> list[str | ToolCall]:
    """The calls in ``body``, or what was ``written`` when they cannot be read."""
    try:
        return list(markup.parse(body))
    except Exception:  # noqa: BLE001 - a half-written or malformed call
        return [written]


_BARE_JSON_CALL = """'{"name": "' + tool_call.name + '", '"""
"""How Llama 3.1-3.3's templates write a call: the reply is a bare JSON object
(``{"name": ..., "parameters": {...}}``), no markers; mlx-lm names no parser."""


def bare_json_call(tokenizer: Any, text: str) -> ToolCall | None:
    """A reply that is one call as Llama 3.x's template writes calls (its
    ``<|python_tag|>`` before it, if any), for such templates only."""
    template = getattr(tokenizer, "chat_template", None)
    body = text.strip().removeprefix("<|python_tag|>").strip()
    for end in ("<|eom_id|>", "<|eot_id|>"):
        body = body.removesuffix(end).strip()
    if not isinstance(template, str) or _BARE_JSON_CALL not in template \
            or not body.startswith("{"):
        return None
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    args = parsed.get("parameters", parsed.get("arguments")) if isinstance(parsed, dict) else None
    if not isinstance(parsed.get("name") if isinstance(parsed, dict) else None, str) \
            or not isinstance(args, dict):
        return None
    return ToolCall(parsed["name"], args)


def split_tool_calls(tokenizer: Any, text: str) -> list[str | ToolCall]:
    """``text`` as plain pieces and the tool calls between the tokenizer's
    markers; a call its parser cannot read, or without its end marker,
    stays plain text. A template without markers that writes a call as the
    whole reply (Llama 3.x) gives that call."""
    markup = call_markup(tokenizer)
    if markup is None:
        bare = bare_json_call(tokenizer, text) if text else None
        return [bare] if bare is not None else [text] if text else []
    if markup.start not in text:
        return [text] if text else []
    start, end = markup.start, markup.end
    out: list[str | ToolCall] = []
    rest = text
    while start in rest:
        before, after = rest.split(start, 1)
        body, sep, rest = after.partition(end) if end else (after, "", "")
        if before:
            out.append(before)
        if end and not sep:  # cut short (a stopped reply): as it was written
            out.append(start + body)
        else:
            out.extend(_read_call(markup, body, start + body + sep))
    if rest:
        out.append(rest)
    return out


def _block(call: ToolCall) -> str:
    args = json.dumps(call.arguments, indent=2, ensure_ascii=False)
    return f"\n\n**Tool call** `{call.name}`\n\n```json\n{args}\n```\n\n"


def _joined(pieces: list[str | ToolCall]) -> str:
    return "".join(_block(p) if isinstance(p, ToolCall) else p for p in pieces)


def as_markdown(pieces: list[str | ToolCall]) -> str:
    """Plain pieces as they are; each call as a heading line and its
    arguments as an indented JSON block."""
    text = _joined(pieces)
    return text.strip("\n") if any(isinstance(p, ToolCall) for p in pieces) else text


def partial_marker(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that begins ``marker`` (a marker
    that may be completed by the next fragment)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class CallStream:
    """A reply's Markdown as its text streams in: text at once, the markup of a
    call in progress held back, and the call's block once it is complete, so
    the shown text only ever grows. Joined, what ``add`` and ``finish``
    return is ``as_markdown(split_tool_calls(text))`` up to blank lines at its
    ends."""

    def __init__(self, markup: CallMarkup | None) -> None:
        self.markup = markup
        self._held = ""
        self._searched = 0

    def add(self, fragment: str) -> str:
        """The Markdown to append for ``fragment``."""
        if self.markup is None:
            return fragment
        start, end = self.markup.start, self.markup.end
        self._held += fragment
        out: list[str] = []
        while self._held:
            held = self._held
            at = held.find(start)
            if at != 0:
                keep = partial_marker(held, start) if at < 0 else len(held) - at
                out.append(held[:len(held) - keep])
                self._held = held[len(held) - keep:]
                if at < 0:
                    break
                continue
            # Searched from where the last search stopped: a long call costs O(n).
            close = held.find(end, max(len(start), self._searched - len(end) + 1)) if end else -1
            if close < 0:
                self._searched = len(held)
                break  # the call is not complete yet: hidden until it is
            whole, self._held = held[:close + len(end)], held[close + len(end):]
            self._searched = 0
            out.append(_joined(_read_call(self.markup, whole[len(start):close], whole)))
        return "".join(out)

    def finish(self) -> str:
        """At the end of the reply: a call that runs to the end is read; one
        cut short is shown as it was written."""
        held, self._held = self._held, ""
        if self.markup is None or not held.startswith(self.markup.start) or self.markup.end:
            return held
        return _joined(_read_call(self.markup, held[len(self.markup.start):], held))
