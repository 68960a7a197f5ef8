"""Stop strings: the answer cut at the first one (held back while it may be
the start of one), and the reply's token ids cut where its kept text ends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
