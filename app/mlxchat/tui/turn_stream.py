"""A message sent from the app and its reply streamed into the transcript.

The send runs on a worker thread (it commits the message and may retrieve
documents first); the reply's text reaches the screen in batches paced by
what drawing costs (``streaming.Pacer``), the live figures once a second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from mlxchat.tui.failures import error_text
from mlxchat.tui.streaming import Pacer, pump_turn

if TYPE_CHECKING:
    from mlxchat.chat import Message
    from mlxchat.engine.events import Event, PrefillProgress, TextDelta, TurnDone
    from mlxchat.session.retrieval import Retrieved
    from mlxchat.tui.widgets import ReplyHandle
    from mlxchat.tui.widgets.transcript import Place

LIVE_GAUGE_SECONDS = 1.0
"""How often the live figures (decoding, context, KV cache) refresh while text
streams: redrawing them costs ~5 ms of the UI thread, as much as the text's own
share of a frame."""
SETTLE_SECONDS = 0.1
"""At most this long a turn waits for the screen to lay out what it mounted."""
PLANNING = "preparing the prompt"
"""What Now says while a message is rendered, counted and committed."""
WAITING = "waiting for the model"
"""What Now says from a turn's start to its first event (the engine thread
may be finishing a typing prefill); a ``Preparing`` event says more."""


class TurnStream:
    """One per app; ``send`` and ``show_*`` on the UI thread, ``stream`` on a worker."""

    def __init__(self, app: Any):
        self.app = app
        """The MlxChatApp (not imported: it imports this module)."""
        self._next_gauge = 0.0
        self._pacer = Pacer()
        """Learns what drawing an update costs; kept from turn to turn."""
        self._place: Place | None = None
        """Where the message being sent shows once committed."""

    def send(self, text: str) -> None:
        """Send ``text`` as the next message and stream its reply."""
        self._place = self.app.transcript.hold_place()  # what is typed next goes under it
        self.app.generating = True
        self.app.gauges.waiting(PLANNING)
        self.app.run_worker(partial(self._send, text), thread=True, group="turn",
                            exit_on_error=False)

    def _send(self, text: str) -> None:
        app, conv = self.app, self.app.conversation
        assert conv is not None
        app.tool_steps.prepare()  # the session's MCP servers up: their tools are in the prompt
        if conv.generation.docs is not None:
            app._ui(app.activity.show, f"retrieving from {conv.generation.docs}…")
        try:
            events = conv.turns.send(text)  # checks the window and commits the message
        except Exception as exc:  # noqa: BLE001 - EngineError, StoreError, ...
            app._ui(self._send_failed, text, error_text(exc))
            return
        finally:
            if conv.generation.docs is not None:
                app._ui(app.activity.hide)
        app._ui(self._show_sent, conv.messages[-1], conv.retrieval.last, conv.turns.switched)
        self.stream(events)

    async def _send_failed(self, text: str, error: str) -> None:
        app = self.app
        app.generating = False
        app.gauges.idle()
        app.transcript.give_up_place(self._place)
        await app.transcript.add_notice(error, "error")
        if not app.prompt.text:
            app.prompt.restore(text)

    async def _show_sent(self, message: Message, retrieved: Retrieved | None,
                         summary: Message | None = None) -> None:
        """The message as sent (after the compaction it switched to: ``summary``),
        and before its prefill what it retrieved and costs."""
        self.app.commands.show_pending()  # the message took them
        transcript = self.app.transcript
        if summary is not None:
            await transcript.add_results([summary], before=self._place)
        if retrieved is not None and message.sources:
            await transcript.add_user(message.content, sources=message.sources,
                                      forecast_s=retrieved.forecast_s,
                                      left_out=retrieved.left_out, budget=retrieved.budget,
                                      images=message.images, place=self._place)
        else:
            await transcript.add_user(message.content, sources=message.sources,
                                      images=message.images, place=self._place)
        self.app.set_titles()

    def stream(self, events: Iterator[Event]) -> None:
        """On a worker thread: consume a started turn, batching onto the UI;
        then, while its reply calls tools, the tool loop's steps and their turns."""
        ui = self.app._ui
        reply, done, error = self._one(events)
        while done is not None and error is None:
            ui(self.show_reply, reply, done)
            step = self.app.tool_steps.after(done)
            if step is None:
                break
            if step.results:
                ui(self.app.transcript.add_results, step.results)
            if step.notice:
                ui(self.app.transcript.add_notice, step.notice,
                   "warning" if step.turn is None else "info")
            if step.turn is None:
                break
            reply, done, error = self._one(step.turn)
        ui(self.show_end, reply, done, error)

    def _one(self, events: Iterator[Event]) -> tuple[ReplyHandle, TurnDone | None, str | None]:
        """One reply streamed into its own message: its end, or the error."""
        ui = self.app._ui
        reply: ReplyHandle = ui(self.app.transcript.start_reply)
        ui(self.app.gauges.waiting, WAITING)
        self._settle_screen()
        pacer = self._pacer
        pacer.restart()

        def show(batch: TextDelta) -> None:
            pacer.record(ui(self.show_batch, reply, batch))
        try:
            done = pump_turn(events, on_text=show, interval=pacer,
                             on_prefill=partial(ui, self.show_prefill),
                             on_preparing=lambda p: ui(self.app.gauges.waiting, p.what))
        except Exception as exc:  # noqa: BLE001 - an engine failure mid-turn
            return reply, None, error_text(exc)
        return reply, done, None

    def _settle_screen(self) -> None:
        """On a worker thread: wait (at most SETTLE_SECONDS) until the screen has
        laid out the message and the reply's frame, so that work is done before
        the model starts instead of in a fast model's first half second of
        decoding (bench/tui.py --quick: the UI thread's share of the decode time
        went from 4.1% to 3.6%)."""
        settled = threading.Event()
        self.app._ui(self.app.call_after_refresh, settled.set)
        settled.wait(SETTLE_SECONDS)

    def show_prefill(self, progress: PrefillProgress) -> None:
        gauges = self.app.gauges
        gauges.prefill(progress)
        now = time.monotonic()
        done = progress.done >= progress.total
        if now >= self._next_gauge or done:
            # Once prefilled, the first text batch shows 'decoding' at once.
            self._next_gauge = 0.0 if done else now + LIVE_GAUGE_SECONDS
            gauges.live_cache(progress.cached_tokens, progress.kv_bytes)

    async def show_batch(self, reply: ReplyHandle, batch: TextDelta) -> float:
        """Returns this thread's CPU time, from which the pacer learns what drawing costs."""
        await reply.append(batch.text, batch.part)
        now = time.monotonic()
        if now >= self._next_gauge:  # the live figures need not move with every batch
            self._next_gauge = now + LIVE_GAUGE_SECONDS
            gauges = self.app.gauges
            gauges.decoding(batch.generated_tokens, batch.decode_tps, batch.part,
                            speculation=batch)
            gauges.live_cache(batch.cached_tokens, batch.kv_bytes)
        return time.thread_time()

    async def show_reply(self, reply: ReplyHandle, done: TurnDone | None) -> None:
        """A reply's end (its footer and figures); the turn may go on with tools."""
        stats = done.stats if done is not None else None
        await reply.finish(stats, cancelled=stats is None or stats.finish_reason == "cancelled")
        self.app.refresh_gauges()

    async def show_end(self, reply: ReplyHandle, done: TurnDone | None,
                        error: str | None) -> None:
        app = self.app
        stats = done.stats if done is not None else None
        await reply.finish(stats, cancelled=stats is None or stats.finish_reason == "cancelled",
                           failed=error is not None)
        app.generating = False
        app.serving.watch()  # a "waiting for the API" line goes with the turn, not a tick later
        app.gauges.idle()
        app.refresh_gauges()
        app.set_titles()
        app.typing.changed(app.prompt.text, at_once=True)  # what was typed meanwhile
        app.compaction.later()
        if error is not None:
            await app.transcript.add_notice(error, "error")
        elif done is not None and done.dropped_messages:
            await app.transcript.add_notice(
                f"The {done.dropped_messages:,} oldest messages were left out to fit the "
                "context window.", "warning")
