"""What OpenAI-shaped requests ask of a reply beyond the generation settings,
checked: ``logit_bias``, ``presence_penalty``, ``frequency_penalty``, ``n``;
and a reply the request begins (its last message, the assistant's)."""

from __future__ import annotations

import math
from typing import Any, Sequence

from mlxchat.engine.turn.reply_options import MAX_CHOICES
from mlxchat.server.core.api_turns import IncomingMessage
from mlxchat.server.core.errors import bad_field
from mlxchat.server.core.requests import number, whole_number

MAX_BIASED = 1024
"""Tokens one ``logit_bias`` may name."""


def logit_bias(data: dict[str, Any]) -> tuple[tuple[int, float], ...]:
    """OpenAI's ``logit_bias``: token ids (as strings) to a bias from -100 to
    100, added to the token's logit (the model's vocabulary is checked where
    the turn runs)."""
    raw = data.get("logit_bias")
    if raw is None:
        return ()
    if not isinstance(raw, dict) or len(raw) > MAX_BIASED:
        raise bad_field("logit_bias", "'logit_bias' must be an object of up to "
                        f"{MAX_BIASED:,} token ids (as strings) to numbers.")
    out = []
    for key, value in raw.items():
        token = key.strip() if isinstance(key, str) else ""
        if not token.isdigit() or isinstance(value, bool) \
                or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not -100 <= value <= 100:
            raise bad_field("logit_bias", f"'logit_bias' maps token ids to numbers from "
                            f"-100 to 100; got {key!r}: {value!r}.")
        out.append((int(token), float(value)))
    return tuple(out)


def penalties(data: dict[str, Any]) -> dict[str, float]:
    """``presence_penalty`` and ``frequency_penalty`` (-2 to 2, OpenAI's range)."""
    out = {}
    for name in ("presence_penalty", "frequency_penalty"):
        value = number(data, name, -2.0, 2.0)
        if value:
            out[name] = value
    return out


def choices(data: dict[str, Any], name: str = "n") -> int:
    """``n``: replies to sample from the one prompt, 1 to ``MAX_CHOICES``."""
    n = whole_number(data, name, 1)
    if n is not None and n > MAX_CHOICES:
        raise bad_field(name, f"'{name}' may be at most {MAX_CHOICES} on this server "
                        f"(each choice holds a copy of the prompt's KV cache); got {n}.")
    return n or 1


def begun_reply(messages: Sequence[IncomingMessage]
                ) -> tuple[list[IncomingMessage], str | None]:
    """The conversation and the text of a reply it ends with (assistant
    prefill: the model continues it), or None when it ends otherwise. An
    empty reply begins nothing."""
    if messages and messages[-1].role == "assistant":
        return list(messages[:-1]), messages[-1].content or None
    return list(messages), None
