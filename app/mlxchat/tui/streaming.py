"""Consume a turn's events off the UI thread and hand them over in batches.

Tokens arrive far faster than a terminal needs to redraw; re-rendering
Markdown per token would steal the CPU the model decodes on. So text is
collected and delivered every ``interval`` seconds (and at the end), and
progress figures at most as often. No Textual here: the app passes callbacks
that marshal onto its thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mlxchat.engine.events import Event, PrefillProgress, TextDelta, TurnDone

FLUSH_SECONDS = 0.05
"""How often streamed text reaches the screen (20 updates a second)."""


@dataclass
class Batch:
    """Text that arrived since the last batch, and the latest decode figures."""

    text: str
    generated_tokens: int
    decode_tps: float


def pump_turn(events: Iterable[Event], *, on_text: Callable[[Batch], None],
              on_prefill: Callable[[PrefillProgress], None],
              interval: float = FLUSH_SECONDS,
              stop: Callable[[], bool] = lambda: False,
              clock: Callable[[], float] = time.monotonic) -> TurnDone | None:
    """Iterate ``events`` to the end; returns the TurnDone (None if ``stop()``
    turned true first: the iterator is then closed, which cancels the turn)."""
    pending: list[str] = []
    last: TextDelta | None = None
    done: TurnDone | None = None
    next_text = next_prefill = clock()

    def flush() -> None:
        nonlocal pending
        if last is not None and pending:
            on_text(Batch("".join(pending), last.generated_tokens, last.decode_tps))
        pending = []

    iterator = iter(events)
    try:
        for event in iterator:
            now = clock()
            if isinstance(event, TextDelta):
                pending.append(event.text)
                last = event
                if now >= next_text:
                    flush()
                    next_text = now + interval
            elif isinstance(event, PrefillProgress):
                if now >= next_prefill or event.done >= event.total:
                    on_prefill(event)
                    next_prefill = now + interval
            elif isinstance(event, TurnDone):
                done = event
            if stop():
                return None
        flush()
        return done
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
