"""System messages after a conversation began (OpenAI's ``system`` and
``developer`` roles, Anthropic's ``system`` role inside ``messages``, the
Responses API's ``developer`` items): one rule for every route.

Those before the first other message are the system prompt (each parser joins
them). A later one is rendered where it stands when the model's chat template
renders a system message there (``renders_system_anywhere``); else its text is
folded into a user turn beside it: the next message when that is the user's,
else the user message it follows, else (after a reply or tool results) it
becomes a user message of its own. The fold never reaches the system prompt:
a changed system prompt would start the conversation's token ledger again.
Each message's place depends only on the messages before and after it in the
same request, never on whether it is the last: a conversation resent with
more after it keeps every earlier message as it was, so its KV is reused.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Sequence

from mlxchat.chat import Message
from mlxchat.engine.prompt.render import render
from mlxchat.server.core.api_turns import IncomingMessage

_PROBE = ("probe-reply-7d1f", "probe-system-7d1f", "probe-user-7d1f")
"""A reply, a system message and a user message, in the order they must render."""


@lru_cache(maxsize=16)
def renders_system_anywhere(tokenizer: Any) -> bool:
    """Whether the chat template renders a system message after a reply, where
    it stands (ChatML, Llama 3, a GGUF's plain template do; Gemma's raises, and
    some drop it)."""
    reply, system, user = _PROBE
    probe = [Message("system", "s"), Message("user", "u"), Message("assistant", reply),
             Message("system", system), Message("user", user)]
    try:
        text = tokenizer.decode(render(tokenizer, probe))
    except Exception:  # noqa: BLE001 - templates raise what they like
        return False
    found = [text.find(marker) for marker in _PROBE]
    return -1 not in found and found == sorted(found)


def _joined(first: str, second: str) -> str:
    return "\n\n".join(t for t in (first, second) if t)


def split_leading(messages: Sequence[IncomingMessage]
                  ) -> tuple[list[str], list[IncomingMessage]]:
    """The texts of the system messages before any other (the system prompt's)
    and the messages after them."""
    n = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
    return [m.content for m in messages[:n]], list(messages[n:])


def place_system_messages(messages: Sequence[IncomingMessage], *, in_place: bool
                          ) -> list[IncomingMessage]:
    """``messages`` (after the system prompt) with each ``system`` one placed by
    the rule above: kept (``in_place``), or folded into a user turn."""
    if in_place or not any(m.role == "system" for m in messages):
        return list(messages)
    out: list[IncomingMessage] = []
    pending: list[str] = []
    """System texts waiting for the next message (it is the user's)."""
    for i, message in enumerate(messages):
        if message.role != "system":
            if pending:
                text = _joined("\n\n".join(pending), message.content)
                message = dataclasses.replace(message, content=text)
                pending = []
            out.append(message)
            continue
        after = next((m for m in messages[i + 1:] if m.role != "system"), None)
        if after is not None and after.role == "user":
            pending.append(message.content)
        elif out and out[-1].role == "user":
            out[-1] = dataclasses.replace(out[-1], content=_joined(out[-1].content,
                                                                   message.content))
        else:
            out.append(IncomingMessage("user", message.content))
    return out
