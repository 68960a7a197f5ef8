"""What a call gave back, as the model reads it: the text of its content (other
content named, not shown), an error said as one, and the whole cut to a
token budget with the cut said to the model and the user."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mlxchat.chat import human_bytes

CUT_BY_LAUNCHER = re.compile(r"^\[mlxchat: the server sent ([\d,]+) bytes; this is its first")
"""The first line ``launch.py`` gives a result it cut before the app read it."""
CHARS_PER_TOKEN_MAX = 16
"""A result is cut to this many characters per budget token before it is
tokenized: no tokenizer's token is longer, and a 50 MB result must not be
tokenized whole."""


@dataclass
class CallOutcome:
    """One call's result, before it is cut."""

    text: str
    is_error: bool = False
    size_bytes: int = 0
    """How much the server sent (text and the data of other content)."""
    note: str = ""
    """One line for the user: an error, a timeout, content the model cannot read."""
    duration_s: float = 0.0


@dataclass
class CutResult:
    text: str
    tokens: int
    """Tokens of ``text`` as the tokenizer counts it alone."""
    cut: bool = False
    total_tokens: int | None = None
    """Tokens of the whole result, when it was counted (None: too large to)."""


def _data_bytes(data: Any) -> int:
    if not isinstance(data, str):
        return 0
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _resource(item: Any) -> tuple[str | None, str, int]:
    """(text or None, what it is, bytes) of an embedded resource."""
    resource = getattr(item, "resource", None)
    uri = str(getattr(resource, "uri", ""))
    mime = getattr(resource, "mime_type", None) or "application/octet-stream"
    text = getattr(resource, "text", None)
    if isinstance(text, str):
        return f"[{uri}]\n{text}", "", len(text.encode("utf-8", "replace"))
    size = _data_bytes(getattr(resource, "blob", None))
    return None, f"{uri} ({mime}, {human_bytes(size)})", size


def from_result(result: Any, *, duration_s: float = 0.0) -> CallOutcome:
    """A ``CallToolResult`` as text: text content as it is, embedded text
    resources with their URI, images, audio, blobs and links named with
    their type and size (the model cannot read them), structured content as
    JSON when there is nothing else."""
    texts: list[str] = []
    others: list[str] = []
    size = 0
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            texts.append(item.text)
            size += len(item.text.encode("utf-8", "replace"))
        elif kind in ("image", "audio"):
            n = _data_bytes(getattr(item, "data", None))
            size += n
            others.append(f"{kind} ({getattr(item, 'mime_type', '?')}, {human_bytes(n)})")
        elif kind == "resource":
            text, what, n = _resource(item)
            size += n
            texts.append(text) if text is not None else others.append(f"resource {what}")
        elif kind == "resource_link":
            others.append(f"link {getattr(item, 'name', '')} {getattr(item, 'uri', '')}".strip())
        else:
            others.append(f"content of type {kind or 'unknown'}")
    structured = getattr(result, "structured_content", None)
    if not texts and structured is not None:
        dumped = json.dumps(structured, ensure_ascii=False, indent=1)
        texts.append(dumped)
        size += len(dumped.encode("utf-8"))
    sent = CUT_BY_LAUNCHER.match(texts[0]) if texts else None
    if sent is not None:
        size = int(sent.group(1).replace(",", ""))
        kept = human_bytes(sum(len(t) for t in texts[1:]))
        others.insert(0, f"all but the first {kept} of a {human_bytes(size)} message")
        texts = texts[1:]
    parts = texts + [f"[{o}: not shown to the model]" for o in others]
    error = bool(getattr(result, "is_error", False))
    text = "\n\n".join(parts) or "(the tool returned nothing)"
    note = ""
    if others:
        note = "not shown to the model: " + ", ".join(others)
    if error:
        first = next((line for line in text.splitlines() if line.strip()), "an error")
        note = f"the tool reported an error: {first[:200]}"
    return CallOutcome(text, is_error=error, size_bytes=size, note=note, duration_s=duration_s)


def failed(why: str, *, duration_s: float = 0.0) -> CallOutcome:
    """A call that gave no result (timed out, the server exited): said to the
    model as an error, and to the user in one line."""
    return CallOutcome(f"Error: {why}", is_error=True, note=why, duration_s=duration_s)


def cut_to_budget(text: str, budget: int, *, encode: Callable[[str], Sequence[int]],
                  decode: Callable[[Sequence[int]], str]) -> CutResult:
    """``text`` within ``budget`` tokens; over it, its first tokens and a line
    saying how much was left out."""
    precut = len(text) > budget * CHARS_PER_TOKEN_MAX
    head = text[:budget * CHARS_PER_TOKEN_MAX] if precut else text
    ids = list(encode(head))
    if len(ids) <= budget and not precut:
        return CutResult(text, len(ids))
    total = None if precut else len(ids)
    whole = f"{total:,} tokens" if total is not None else \
        human_bytes(len(text.encode("utf-8", "replace")))
    line = f"\n\n[Result cut: it was {whole}; shown up to here (tool_result_tokens = {budget:,}).]"
    room = len(encode(line))
    if room > budget // 2:  # a tiny budget: the shortest word for it
        line = "\n[cut]"
        room = len(encode(line))
    keep = max(budget - room, 1)
    return CutResult(decode(ids[:keep]).rstrip() + line, keep + room, cut=True,
                     total_tokens=total)
