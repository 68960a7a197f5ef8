"""A reply computed once for every request that asks for it: a client that
sends the same request again while the first is still computing (it timed
out and retried, or two of its processes asked) joins the one in progress
and is given all it said so far, then the rest, as the first is; nothing is
prefilled twice. The computation is cancelled when its last listener leaves:
at once when it has said something; while its prompt is still being read
(``keeps``: nothing said yet) only ``rejoin_s`` later, so that a client that
timed out and sends the request again finds it running (and, finished
meanwhile, finds its reply for ``rejoin_s`` more).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from typing import Any, AsyncIterator, Callable

from mlxchat.server.core.requests import ChatRequest


def request_identity(model: str, request: ChatRequest) -> str:
    """What makes two requests ask for the same reply: the model, the whole
    conversation as the client sees it (and the stored reply it follows: a
    Responses follow-up's chain), the settings, tools, the schema the reply
    (or its calls) follows, the calls it may make, what it asks of the reply
    beyond the settings (biases, log-probabilities, choices, a text it
    begins) and stop strings."""
    turn = request.turn
    output = None if turn.output is None else [turn.output.format.schema,
                                               turn.output.format.name, turn.output.opens]
    parts = [model, turn.system, [(m.role, m.content, m.signature) for m in turn.messages],
             turn.settings, turn.session_name, turn.tools, output, turn.fills_window,
             turn.after, turn.options, turn.prefill, request.max_calls, request.stop]
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ReplyProgress:
    """Set on the thread that computes a reply as it goes: its prefill started,
    it said something (``first_token_at``: when, ``time.monotonic()``).
    ``now()``: its prompt is being read."""

    def __init__(self) -> None:
        self.started, self.said = threading.Event(), threading.Event()
        self.first_token_at: float | None = None

    def saying(self) -> None:
        """A token of the reply came."""
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        self.said.set()

    def now(self) -> bool:
        return self.started.is_set() and not self.said.is_set()


class _Shared:
    """One computation's items, kept for every listener, read by a task of its own."""

    def __init__(self, source: AsyncIterator[Any], done: Callable[[], None], *,
                 keeps: Callable[[], bool], rejoin_s: float):
        self.items: list[Any] = []
        self._keeps, self._rejoin_s = keeps, rejoin_s
        self.error: BaseException | None = None
        self.finished = False
        self.listeners = 0
        self._changed = asyncio.Event()
        self._source = source
        self._done = done
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        try:
            async for item in self._source:
                self.items.append(item)
                self._changed.set()
        except BaseException as exc:  # noqa: BLE001 - every listener raises it
            self.error = exc
        finally:
            await self._source.aclose()  # type: ignore[attr-defined]
            self.finished = True
            if self.listeners or self.error is not None or self._rejoin_s <= 0:
                self._done()
            else:  # finished while its client was away: it may still come for it
                asyncio.get_running_loop().call_later(self._rejoin_s, self._done)
            self._changed.set()

    async def listen(self) -> AsyncIterator[Any]:
        self.listeners += 1
        seen = 0
        try:
            while True:
                while seen < len(self.items):
                    seen += 1
                    yield self.items[seen - 1]
                if self.finished:
                    if self.error is not None and not isinstance(self.error,
                                                                 asyncio.CancelledError):
                        raise self.error
                    return
                self._changed.clear()
                if seen < len(self.items) or self.finished:
                    continue
                await self._changed.wait()
        finally:
            self.listeners -= 1
            if self.finished and seen == len(self.items):
                self._done()  # given whole: a request asking again is a new one
            elif not self.listeners and not self.finished:
                if self._keeps() and self._rejoin_s > 0:
                    asyncio.get_running_loop().call_later(self._rejoin_s, self._expire)
                else:
                    self._expire()

    def _expire(self) -> None:
        """Cancel the computation when nobody listens (any more)."""
        if not self.listeners and not self.finished:
            self._done()  # none joins it any more
            self._task.cancel()


REJOIN_S = 120.0
"""How long a reply whose prompt is still being read outlives its last
listener, and one that finished with none stays to be given to it: a client
that timed out sends the request again after a back-off (Claude Code's grew
to 39 s over its retries)."""


class SharedReplies:
    """The replies being computed now, by request identity."""

    def __init__(self, *, rejoin_s: float = REJOIN_S) -> None:
        self._running: dict[str, _Shared] = {}
        self.rejoin_s = rejoin_s

    def listen(self, identity: str | None, start: Callable[[], AsyncIterator[Any]], *,
               keeps: Callable[[], bool] = lambda: False) -> tuple[AsyncIterator[Any], bool]:
        """The items of the computation ``identity`` names, started by ``start()``
        unless one runs already (then: joined, True); ``keeps()``, asked when its
        last listener leaves: it waits ``rejoin_s`` for one to come back (its
        prompt is still being read)."""
        shared = self._running.get(identity) if identity is not None else None
        joined = shared is not None
        if shared is None:
            def done() -> None:
                if identity is not None and self._running.get(identity) is made:
                    del self._running[identity]
            made = shared = _Shared(start(), done, keeps=keeps,
                                    rejoin_s=self.rejoin_s)
            if identity is not None:
                self._running[identity] = made
        return shared.listen(), joined

    @property
    def computing(self) -> int:
        """Replies being computed now (listened to, or waiting for a listener)."""
        return len(self._running)

    @property
    def listening(self) -> int:
        """Requests reading a reply being computed now."""
        return sum(shared.listeners for shared in self._running.values())
