"""One choice of a reply as its client sees it: the answer cut at the first
stop string, text held back at a tool call's markup, the calls read once,
and each token's log-probability said with the text it wrote."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlxchat.chat import CalledTool
from mlxchat.engine.events import TextDelta, TokenLogprob
from mlxchat.models.tools import call_markup
from mlxchat.server.core.tool_calls import CallCut, ReplyParts, reply_parts, with_ids

Said = tuple[str, tuple[TokenLogprob, ...]]
"""Answer text safe to send now, and the figures of the tokens that wrote it."""


@dataclass
class StopWatch:
    """Cuts the answer at the first stop string, holding back text that may be
    the start of one."""

    stops: list[str]
    seen: str = ""
    sent: int = 0
    stopped: bool = False
    matched: str | None = None
    """The stop string found."""

    def feed(self, text: str) -> str:
        """The text that is safe to send now."""
        if self.stopped:
            return ""
        self.seen += text
        if not self.stops:
            return self._send(len(self.seen))
        # Text before ``sent`` held no stop's start when it was sent: search after it.
        found = [(i, s) for i, s in ((self.seen.find(s, self.sent), s) for s in self.stops)
                 if i >= 0]
        if found:
            cut, self.matched = min(found, key=lambda f: f[0])
            self.stopped = True
            self.seen = self.seen[:cut]
            return self._send(cut)
        hold = max(len(s) - 1 for s in self.stops)
        return self._send(max(self.sent, len(self.seen) - hold))

    def flush(self) -> str:
        return self._send(len(self.seen))

    def _send(self, upto: int) -> str:
        out = self.seen[self.sent:upto]
        self.sent = max(self.sent, upto)
        return out


class ChoiceReader:
    """A choice's answer as it streams (``feed``, then ``flush``) and as it
    ends (``parts``, ``finish_reason``)."""

    def __init__(self, tokenizer: Any, stops: list[str], *, tools: bool,
                 max_calls: int | None = None):
        self.tokenizer, self.tools, self.max_calls = tokenizer, tools, max_calls
        """``max_calls``: the calls a reply may make (the rest are dropped); None: any."""
        self.watch = StopWatch(stops)
        self.cut = CallCut(call_markup(tokenizer) if tools else None)
        self._parsed: dict[str, tuple[ReplyParts, tuple[CalledTool, ...]]] = {}
        self._figures: list[TokenLogprob] = []
        self.said: list[TokenLogprob] = []
        """The figures of every token whose text went out."""

    def feed(self, event: TextDelta) -> Said | None:
        """What of an answer's delta may go out now (None: nothing yet)."""
        self._figures.extend(event.logprobs)
        return self._said(self.cut.feed(self.watch.feed(event.text)))

    def flush(self) -> Said | None:
        """The answer's text held back until its end."""
        return self._said(self.cut.feed(self.watch.flush()))

    def _said(self, text: str) -> Said | None:
        if not text:
            return None
        figures, self._figures = tuple(self._figures), []
        self.said.extend(figures)
        return text, figures

    def parts(self) -> tuple[ReplyParts, tuple[CalledTool, ...]]:
        """The answer's text and calls (read once: indexing the reply and
        answering it see the same calls' ids)."""
        seen = self.watch.seen
        if seen not in self._parsed:
            self._parsed.clear()
            reply = reply_parts(self.tokenizer, seen, tools=self.tools)
            self._parsed[seen] = reply, with_ids(reply.calls[:self.max_calls])
        return self._parsed[seen]

    def finish_reason(self, engine_reason: str) -> str:
        """OpenAI's word for how the choice ended."""
        if self.parts()[1]:
            return "tool_calls"
        if self.watch.stopped:
            return "stop"
        return "length" if engine_reason == "length" else "stop"


def ids_up_to(tokenizer: Any, ids: list[int], answer: str, kept: int) -> list[int] | None:
    """The first of a reply's ``ids`` that write it up to ``kept`` characters
    of its answer text ``answer`` (which its text ends with), or None when no
    prefix writes exactly that (a stop string that starts inside a token)."""
    whole = tokenizer.decode(ids)
    if not whole.endswith(answer):
        return None
    want = whole[:len(whole) - len(answer) + kept]
    low, high = 0, len(ids)
    while low < high:  # the fewest ids whose text is at least as long
        mid = (low + high) // 2
        if len(tokenizer.decode(ids[:mid])) < len(want):
            low = mid + 1
        else:
            high = mid
    for n in (low, low + 1):  # an incomplete character may show as one more
        if n <= len(ids) and tokenizer.decode(ids[:n]) == want:
            return ids[:n]
    return None
