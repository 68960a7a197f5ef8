"""Consume a turn's events off the UI thread and hand them over in batches.

Tokens arrive far faster than a terminal needs to redraw; re-rendering
Markdown per token would steal the CPU the model decodes on. So text is
collected and delivered every ``interval`` seconds (and at the end), and
progress figures at most as often. A ``Pacer`` stretches the interval when
drawing an update is expensive. No Textual here: the app passes callbacks
that marshal onto its thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from mlxchat.engine.events import Event, PrefillProgress, Preparing, TextDelta, TurnDone

FLUSH_SECONDS = 0.05
"""How often streamed text reaches the screen at most (20 updates a second)."""
UI_SHARE = 0.03
"""The share of the UI thread's time that drawing streamed text may take: the
model's own Python needs the same interpreter lock, so this share comes
nearly whole off the decode speed (bench/tui.py)."""
MAX_FLUSH_SECONDS = 0.5
"""However costly drawing is, text still moves twice a second."""


class Pacer:
    """The interval between screen updates that keeps drawing them near ``share``
    of the UI thread's time over the whole turn. Measured, not guessed: a layout
    pass of a busy screen costs from ~1 ms to tens of ms, and it competes with
    the model's own Python for the CPU and the GIL (bench/tui.py).

    The account runs from the turn's first update, so a costly update (the
    first, which mounts the reply's first paragraph, or one that starts a code
    block) is paid back by waiting longer before the next, not forgotten."""

    def __init__(self, *, share: float = UI_SHARE, floor: float = FLUSH_SECONDS,
                 ceiling: float = MAX_FLUSH_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.share, self.floor, self.ceiling, self.clock = share, floor, ceiling, clock
        self.interval = floor
        self._start: tuple[float, float] | None = None  # (UI CPU, time) at the first update
        self._last_cpu = 0.0
        self._cost = 0.0  # what one update costs, smoothed

    def restart(self) -> None:
        """A new turn: keep the interval and the cost learned so far (so its first
        updates are paced already), start a new account (the time between turns
        is not drawing)."""
        self._start = None

    def record(self, ui_cpu: float) -> None:
        """``ui_cpu``: the UI thread's CPU seconds (``time.thread_time()`` read
        there) at an update; the growth since the last one is what drawing cost."""
        now = self.clock()
        if self._start is None:
            self._start, self._last_cpu = (ui_cpu, now), ui_cpu
            return
        cost = max(ui_cpu - self._last_cpu, 0.0)
        self._cost = cost if not self._cost else 0.5 * (self._cost + cost)
        self._last_cpu = ui_cpu
        spent = ui_cpu - self._start[0]
        # The next update is due when the turn's drawing so far, and one more
        # update's worth, comes to ``share`` of the time since its first update.
        due = self._start[1] + (spent + self._cost) / self.share
        self.interval = min(self.ceiling, max(self.floor, due - now))

    def __call__(self) -> float:
        return self.interval


def pump_turn(events: Iterable[Event], *, on_text: Callable[[TextDelta], None],
              on_prefill: Callable[[PrefillProgress], None],
              on_preparing: Callable[[Preparing], None] = lambda _: None,
              interval: float | Callable[[], float] = FLUSH_SECONDS,
              stop: Callable[[], bool] = lambda: False,
              clock: Callable[[], float] = time.monotonic) -> TurnDone | None:
    """Iterate ``events`` to the end, handing ``on_text`` the text since the
    last update as one TextDelta of one part; returns the TurnDone (None if ``stop()``
    turned true first: the iterator is then closed, which cancels the turn);
    ``on_preparing`` gets what the turn does before its prefill, when slow.
    ``interval`` may be a callable (a ``Pacer``), read after each update."""
    pace = interval if callable(interval) else (lambda: interval)
    pending: list[str] = []
    last: TextDelta | None = None
    done: TurnDone | None = None
    next_text = next_prefill = clock()

    def flush() -> None:
        nonlocal pending
        if last is not None and pending:
            # One TextDelta for the batch: its text, the last piece's figures.
            on_text(replace(last, text="".join(pending)))
        pending = []

    iterator = iter(events)
    try:
        for event in iterator:
            now = clock()
            if isinstance(event, TextDelta):
                if last is not None and event.part != last.part:
                    flush()  # a batch holds one part: the reasoning ends here
                pending.append(event.text)
                last = event
                if now >= next_text:
                    flush()
                    next_text = now + pace()
            elif isinstance(event, PrefillProgress):
                if now >= next_prefill or event.done >= event.total:
                    on_prefill(event)
                    next_prefill = now + pace()
            elif isinstance(event, TurnDone):
                done = event
            elif isinstance(event, Preparing):
                on_preparing(event)
            if stop():
                return None
        flush()
        return done
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
