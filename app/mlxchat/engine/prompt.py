"""Turning a conversation into prompt tokens: rendering, fitting the window,
and explaining why the cache could not be reused."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

import jinja2

from mlxchat.chat import Message
from mlxchat.engine import template, template_render
from mlxchat.engine.events import ContextOverflowError, EngineError
from mlxchat.models.info import takes_system
from mlxchat.models.token_floor import least_tokens


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


def fold_system(dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system prompt at the start of the first user message (alone, a user message)."""
    system, rest = dicts[0]["content"], dicts[1:]
    if rest and rest[0]["role"] == "user":
        return [{"role": "user", "content": f"{system}\n\n{rest[0]['content']}"}] + rest[1:]
    return [{"role": "user", "content": system}] + rest


def render(tokenizer: Any, messages: Sequence[Message], *, generation_prompt: bool = True,
           **template_kwargs: Any) -> list[int]:
    """Token ids of the conversation through the model's chat template;
    ``template_kwargs`` reach the template (``date_string``, ``enable_thinking``;
    a function such as ``strftime_now`` as a global, see template_render).

    Message text (tool calls, results and definitions too) is always plain
    text: when some of it spells one of the tokenizer's control tokens, the
    template is rendered around it instead (engine/template.py), so only the
    template makes control tokens."""
    dicts = as_dicts(messages)
    if dicts and dicts[0]["role"] == "system" and not takes_system(tokenizer):
        dicts = fold_system(dicts)
    try:
        texts = template.strings([dicts, template_kwargs.get("tools")])
        if template.has_control_text(tokenizer, texts):
            return template.render_ids(tokenizer, dicts, generation_prompt=generation_prompt,
                                       **template_kwargs)
        return template_render.render(tokenizer, dicts, generation_prompt=generation_prompt,
                                      tokenize=True, **template_kwargs)
    except jinja2.TemplateError as exc:  # the template's own raise_exception, mostly
        raise TemplateRefused(f"this model's chat template refuses the conversation: "
                              f"{exc}") from None


class TemplateRefused(EngineError):
    """The chat template raised on a conversation (tool results without a
    call, say, for gpt-oss)."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class FittedPrompt:
    """The tokens of a turn's prompt and the conversation they hold."""

    tokens: list[int]
    messages: list[Message]
    dropped: int
    reason: str | None = None
    """Why the prompt does not extend the cached tokens, when the caller knows
    (a new token ledger); reported as the miss reason if the cache had more."""
    ledger: bool = False
    """The tokens are a token ledger (earlier turns as sent), not a fresh render."""


def reply_reserve(max_tokens: int, window: int) -> int:
    """Tokens kept free for the reply when deciding what fits (at most half the window)."""
    return max(1, min(max_tokens, window // 2))


def _newest_unit(messages: Sequence[Message]) -> int:
    """How many of the newest messages go together: trailing tool results with
    the reply that called them (a template may refuse results alone), else one."""
    n = 0
    while n < len(messages) and messages[-1 - n].role == "tool":
        n += 1
    if n and n < len(messages) and messages[-1 - n].role == "assistant":
        n += 1
    return max(n, 1) if messages else 0


def refuse_unfittable(tokenizer: Any, texts: Sequence[str], *, window: int) -> None:
    """ContextOverflowError, before any tokenizing, when ``texts`` (the
    newest messages) take at least the whole window, whatever the policy:
    a 15 MB message is refused in milliseconds instead of tokenized first."""
    floor = least_tokens(tokenizer, texts)
    if floor.tokens >= window:
        raise ContextOverflowError(
            f"This message is at least {floor.tokens:,} tokens ({floor.text_bytes:,} bytes; "
            f"no token of this model holds more than {floor.token_bytes}); the context window "
            f"is {window:,} tokens. Shorten it or attach less.")


def fit(tokenizer: Any, messages: Sequence[Message], *, window: int, max_tokens: int,
        policy: str, template_kwargs: dict[str, Any] | None = None) -> FittedPrompt:
    """Render ``messages``; when they overflow the window apply ``policy``.

    ``drop_oldest`` removes the oldest non-system messages (keeping the newest
    one, or the newest tool results with the reply that called them) until the
    prompt plus the reply reserve fits; ``stop`` refuses.
    """
    messages = list(messages)
    newest = messages[len(messages) - _newest_unit(messages):]
    refuse_unfittable(tokenizer, [m.content for m in newest if m.role != "assistant"],
                      window=window)
    kw = template_kwargs or {}
    reserve = reply_reserve(max_tokens, window)
    tokens = render(tokenizer, messages, **kw)
    if len(tokens) + reserve <= window:
        return FittedPrompt(tokens, messages, 0)
    system = [m for m in messages[:1] if m.role == "system"]
    rest = messages[len(system):]
    unit = _newest_unit(rest)
    minimal = render(tokenizer, system + rest[-unit:], **kw)
    if len(minimal) >= window:
        size = len(render(tokenizer, rest[-unit:], generation_prompt=False, **kw)) \
            if rest else 0
        what = "These tool results (with the call) are" if unit > 1 else "This message is"
        raise ContextOverflowError(
            f"{what} {size:,} tokens (the prompt with them {len(minimal):,}); "
            f"the context window is {window:,} tokens. Shorten it or attach less.")
    if policy == "stop":
        raise ContextOverflowError(
            f"The conversation needs {len(tokens):,} tokens plus {reserve:,} for the reply; "
            f"the context window is {window:,}. Start a /new session, "
            "`/set context_policy drop_oldest`, or lower max_tokens.")
    dropped = 0
    while len(rest) > unit and len(tokens) + reserve > window:
        # Cut up to the next user message so the history never starts with a
        # reply or a tool result (the newest unit aside).
        cut = 1
        while cut < len(rest) - unit and rest[cut].role != "user":
            cut += 1
        rest = rest[cut:]
        dropped += cut
        tokens = render(tokenizer, system + rest, **kw)
    return FittedPrompt(tokens, system + rest, dropped)


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


def first_difference(old: Sequence[tuple[str, str]], new: Sequence[Message]) -> int:
    """Index of the first message that differs between two conversations."""
    i = 0
    while i < min(len(old), len(new)) and old[i] == (new[i].role, new[i].content):
        i += 1
    return i


def miss_reason(previous: Sequence[tuple[str, str]], fitted: FittedPrompt,
                original: Sequence[Message], shared: int = 0) -> str:
    """Words for why the cache held tokens this turn could not reuse
    (``shared``: leading tokens the cache and the prompt still have in common)."""
    if fitted.dropped:
        return f"context overflow: dropped {fitted.dropped} oldest messages"
    k = first_difference(previous, original)
    if k == len(previous):
        if fitted.ledger:  # never re-rendered: the cache came from elsewhere
            return (f"the cached tokens differ from this conversation's from token {shared:,}"
                    " (a cache of another conversation)")
        return "template re-rendered an earlier turn"
    changed = previous[k]
    if changed[0] == "system" or (k < len(original) and original[k].role == "system"):
        return "system prompt changed"
    if k == 0:
        if shared:  # an edit of the first message, or another conversation
            return (f"the first message differs: trimmed back to the template's opening "
                    f"({shared:,} tokens)")
        return "another conversation: nothing in common with the cache"
    if k == len(original) and changed[0] == "assistant":
        return "reply retried: trimmed back to the branch point"
    return f"history edited at message {k + 1}: trimmed back to the branch point"
