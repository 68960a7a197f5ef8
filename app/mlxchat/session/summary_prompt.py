"""The fixed prompt a compaction's summary is written from, and the summary
read back from what the model wrote.

The prompt is one user message after the session's system part (its system
prompt and pinned documents, which are context, never summarized): the
request below, the earlier summary when there is one, then the messages to
summarize as a plain transcript. What goes in is bounded: a reply's
reasoning never (only its answer), a tool call's arguments and a tool's
result at most ``TOOL_CAP`` characters each, any other message at most
``MESSAGE_CAP`` (its start and its end), and the whole transcript at most a
``INPUT_SHARE``-th of the window (the caps halve until it fits). Message text
is text to the template: a transcript that spells a control token cannot end
the prompt's turn. The summary is written greedily, with the template's
thinking switched off, and only its answer part is taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from mlxchat.chat import Message, calls_text
from mlxchat.engine.turn.reasoning import split_reply
from mlxchat.sources import without_sources

SUMMARY_REQUEST = (
    "Summarize the conversation below so that it can go on without it. Keep every fact, "
    "name, number, decision and open question it holds; leave out greetings and "
    "pleasantries. Write plain sentences, at most {words} words, and nothing else.")
EARLIER = "An earlier summary of what came before it:"
TOOL_CAP = 600
"""Characters of a tool call's arguments or a tool's result that go in."""
MESSAGE_CAP = 4000
"""Characters of any other message that go in (its start and end)."""
INPUT_SHARE = 4
"""The transcript takes at most this fraction of the window (1/4)."""
MAX_SUMMARY_TOKENS = 384
MIN_SUMMARY_TOKENS = 16
SUMMARY_SHARE = 16
"""A summary takes at most 1/16 of the window (and MAX_SUMMARY_TOKENS)."""
_SMALLEST_CAP = 64


@dataclass(frozen=True)
class SummaryRequest:
    """The user message that asks for a summary, and its bounds."""

    text: str
    max_tokens: int
    cap: int
    """The per-message cap the transcript fitted at (characters)."""


def summary_limit(window: int) -> int:
    """Tokens a summary may take in a window of ``window`` tokens."""
    return max(MIN_SUMMARY_TOKENS, min(MAX_SUMMARY_TOKENS, window // SUMMARY_SHARE))


def cut(text: str, cap: int) -> str:
    """``text`` at most about ``cap`` characters: its start and its end, and
    how much was left out between them."""
    if len(text) <= cap:
        return text
    head, tail = text[:cap * 2 // 3], text[len(text) - cap // 3:]
    return f"{head} [… {len(text) - len(head) - len(tail):,} characters left out …] {tail}"


def _entry(m: Message, cap: int) -> str | None:
    if m.role == "user":
        return "User: " + cut(without_sources(m.content).strip(), cap)
    if m.role == "assistant":
        said = cut(m.content.strip(), cap)  # the answer: ``reasoning`` never goes in
        calls = cut(calls_text(m.tool_calls), min(cap, TOOL_CAP)) if m.tool_calls else ""
        return "Assistant: " + "\n".join(p for p in (said, calls) if p)
    if m.role == "tool":
        return f"Tool result ({m.tool_name or 'tool'}): " + cut(m.content.strip(),
                                                                 min(cap, TOOL_CAP))
    return None  # system parts are context; summaries come in as ``earlier``


def transcript(messages: Sequence[Message], *, earlier: str | None, cap: int) -> str:
    """The messages as the request quotes them, each cut to ``cap`` characters."""
    parts = [f"{EARLIER}\n{cut(earlier.strip(), cap)}"] if earlier else []
    parts += [e for m in messages if (e := _entry(m, cap)) is not None]
    return "\n\n".join(parts)


def summary_request(messages: Sequence[Message], *, earlier: str | None, window: int,
                    count: Callable[[str], int]) -> SummaryRequest:
    """The request for ``messages`` (after an ``earlier`` summary), its
    transcript within a ``INPUT_SHARE``-th of ``window`` as ``count`` measures it."""
    limit = summary_limit(window)
    words = max(8, limit * 3 // 5)
    head = SUMMARY_REQUEST.format(words=words)
    budget = window // INPUT_SHARE
    cap = MESSAGE_CAP
    while True:
        body = transcript(messages, earlier=earlier, cap=cap)
        if cap <= _SMALLEST_CAP or count(body) <= budget:
            break
        cap //= 2
    if count(body) > budget:  # many small messages: the newest of them go
        kept = list(messages)
        while kept and count(transcript(kept, earlier=earlier, cap=cap)) > budget:
            kept = kept[max(1, len(kept) // 8):]
        body = transcript(kept, earlier=earlier, cap=cap)
    return SummaryRequest(f"{head}\n\n<conversation>\n{body}\n</conversation>", limit, cap)


def summary_text(tokenizer: Any, prompt: Sequence[int], written: Sequence[int],
                 stops: Sequence[int]) -> str:
    """The answer part of what was written for ``prompt`` (reasoning, if the
    model wrote any, is left out), its end token taken off."""
    ids = list(written)
    end = ids.pop() if ids and ids[-1] in set(stops) else None
    return split_reply(tokenizer, prompt, ids, end_token=end).answer.strip()
