"""A conversation as prompt tokens, through the model's chat template: the
messages as templates read them, the render, and each message's cost."""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import jinja2

from mlxchat.chat import Message
from mlxchat.engine.events import EngineError
from mlxchat.engine.prompt import control
from mlxchat.engine.prompt.control import spliced_ids
from mlxchat.engine.prompt.jinja import apply_template
from mlxchat.models.info import takes_system
from mlxchat.models.tool_prompt import polyfilled, renders_tools


GENERIC_TOOLS = "_mlxchat_generic_tools"
"""A render argument (never the template's): tools go in the generic tool
prompt where the template has no place for them."""


def template_call_id(given: str) -> str:
    """A call's id as templates take it: Mistral's insist on 9 letters or
    digits, so another id is rendered as 9 of its hash's (the call and the
    result that answers it map alike)."""
    if len(given) == 9 and given.isascii() and given.isalnum():
        return given
    return hashlib.sha256(given.encode("utf-8", "surrogatepass")).hexdigest()[:9]


def as_dict(m: Message) -> dict[str, Any]:
    """A message as chat templates read it (OpenAI's shape for tool calls and results)."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.images:  # content parts, as vision-language templates take them
        out["content"] = [{"type": "image"} for _ in m.images] + [{"type": "text",
                                                                   "text": m.content}]
    if m.tool_calls:
        out["tool_calls"] = [{"id": template_call_id(c.id), "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments}}
                             for c in m.tool_calls]
    if m.role == "tool":
        out["tool_call_id"] = template_call_id(m.tool_call_id or "")
        out["name"] = m.tool_name or ""
    return out


def as_dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [as_dict(m) for m in messages]


def reads_parts_only(tokenizer: Any) -> bool:
    """The template reads every message's content as parts and has no branch
    for a string (SmolVLM-Instruct's: a string's text would be dropped)."""
    source = getattr(tokenizer, "chat_template", None)
    return isinstance(source, str) and "['content'][0]['type']" in source \
        and "is string" not in source


def as_parts(dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each plain content as one text part."""
    return [{**d, "content": [{"type": "text", "text": d["content"]}]}
            if isinstance(d.get("content"), str) else d for d in dicts]


def fold_system(dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system prompt at the start of the first user message (alone, a user message)."""
    system, rest = dicts[0]["content"], dicts[1:]
    if rest and rest[0]["role"] == "user":
        return [{"role": "user", "content": f"{system}\n\n{rest[0]['content']}"}] + rest[1:]
    return [{"role": "user", "content": system}] + rest


def render(tokenizer: Any, messages: Sequence[Message], *, generation_prompt: bool = True,
           open_last: bool = False, **template_kwargs: Any) -> list[int]:
    """Token ids of the conversation through the model's chat template;
    ``template_kwargs`` reach the template (``date_string``, ``enable_thinking``;
    a function such as ``strftime_now`` as a global, see prompt/jinja.py).

    Message text (tool calls, results and definitions too) is always plain
    text: when some of it spells one of the tokenizer's control tokens, the
    template is rendered around it instead (prompt/control.py), so only the
    template makes control tokens. With ``GENERIC_TOOLS`` set, tools for a
    template that renders none take the generic tool prompt
    (``models.tool_prompt``). ``open_last``: the last message (a reply the
    request begins) is left open for the model to continue."""
    dicts = as_dicts(messages)
    generic = template_kwargs.pop(GENERIC_TOOLS, False)
    if generic and template_kwargs.get("tools") and not renders_tools(tokenizer):
        dicts = polyfilled(dicts, template_kwargs.pop("tools"))
    if dicts and dicts[0]["role"] == "system" and not takes_system(tokenizer):
        dicts = fold_system(dicts)
    if reads_parts_only(tokenizer):
        dicts = as_parts(dicts)
    try:
        texts = control.strings([dicts, template_kwargs.get("tools")])
        if open_last:
            return control.open_turn_ids(tokenizer, dicts, **template_kwargs)
        if control.has_control_text(tokenizer, texts):
            return spliced_ids(tokenizer, dicts, generation_prompt=generation_prompt,
                                       **template_kwargs)
        return apply_template(tokenizer, dicts, generation_prompt=generation_prompt,
                                      tokenize=True, **template_kwargs)
    except jinja2.TemplateError as exc:  # the template's own raise_exception, mostly
        raise TemplateRefused(f"this model's chat template refuses the conversation: "
                              f"{exc}") from None
    except ValueError as exc:  # an open last message the template does not write
        if not open_last:
            raise
        raise TemplateRefused(f"this model's chat template cannot continue a reply: "
                              f"{exc}") from None


class TemplateRefused(EngineError):
    """The chat template raised on a conversation (tool results without a
    call, say, for gpt-oss)."""


def message_token_counts(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """Tokens each message adds to the rendered prompt (template overhead included).

    Renders every prefix; the differences are what each message costs.
    """
    counts, prev = [], 0
    for i in range(1, len(messages) + 1):
        n = len(render(tokenizer, messages[:i], generation_prompt=False))
        counts.append(max(0, n - prev))
        prev = n
    return counts


_OPENING_PROBE = (Message("user", "Which tokens open the prompt?"), Message("assistant", "These."))


def template_opening(tokenizer: Any, **template_kwargs: Any) -> list[int]:
    """The ids the template puts before a conversation's first message when it
    has no system message (begin-of-text, a default system prompt): what the
    first message costs alone less what the same message costs later on.
    Empty when the two do not split so exactly."""
    question, answer = _OPENING_PROBE
    alone = render(tokenizer, [question], generation_prompt=False, **template_kwargs)
    before = render(tokenizer, [question, answer], generation_prompt=False, **template_kwargs)
    again = render(tokenizer, [question, answer, question], generation_prompt=False,
                   **template_kwargs)
    own = len(again) - len(before)
    lead = len(alone) - own
    if not 0 < lead < len(alone) or alone[lead:] != again[len(again) - own:]:
        return []
    return alone[:lead]
