"""Figures every route reports beside its reply in the same way: the room a
``max_tokens`` past the window was capped to, and why a conversation's KV was
recomputed."""

from __future__ import annotations

from typing import Any

from mlxchat.turn_stats import TurnStats


def capped_to(stats: TurnStats, asked: int | None) -> int | None:
    """The most tokens the reply could have had when the request asked for
    more than the window leaves after the prompt, else None (a max_tokens past
    the whole window is refused before it runs: ``requests.too_many_tokens``)."""
    room = max(0, stats.context_window - stats.prompt_tokens + 1)  # the last is never fed
    return room if asked is not None and stats.context_window and asked > room else None


def capped_header(stats: TurnStats, asked: int | None) -> dict[str, str]:
    """The same as a header, for a reply asked for whole."""
    capped = capped_to(stats, asked)
    return {} if capped is None else {"X-Max-Tokens-Capped": str(capped)}


def window_fields(end: Any) -> dict[str, Any]:
    """What made room in the window for a reply, beside it in every body:
    ``recalled`` (the passages of earlier messages brought back: text, the
    message, tokens) and ``compaction`` (the compaction switched to, or why
    the oldest messages were left out), each only when there is one."""
    out: dict[str, Any] = {}
    if getattr(end, "recalled", ()):
        out["recalled"] = list(end.recalled)
    note = getattr(end.stats, "compaction", None)
    if note:
        out["compaction"] = note
    return out


def miss_header(first: Any) -> dict[str, str]:
    """``X-Cache-Miss: REASON`` when the conversation's KV was recomputed
    (known before the first piece, so a stream has it too: on its first
    ``Piece``, ``Planned`` or ``Finished``)."""
    miss = getattr(first, "cache_miss", None)
    return {"X-Cache-Miss": miss} if miss else {}
