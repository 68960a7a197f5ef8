"""The chat service behind every endpoint: a request becomes a turn on the one
conversation, run in the engine lane; what it says comes back as pieces the
endpoints put in their own shapes."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import anyio

from mlxchat.chat import CalledTool
from mlxchat.engine.events import ContextOverflowError, Event, TextDelta, TurnDone
from mlxchat.engine.interface import Engine
from mlxchat.engine.prompt.fit import refuse_unfittable
from mlxchat.engine.thread.compute import WaitCancelled
from mlxchat.engine.thread.worker import waits_end_on
from mlxchat.errors import MlxchatError
from mlxchat.models.token_floor import tokens_at_least
from mlxchat.models.tools import call_markup
from mlxchat.server.core.access_log import note_turn
from mlxchat.server.core.admission import admission_for
from mlxchat.server.core.api_turns import ApiTurns, IncomingMessage, conversation_key
from mlxchat.server.core.errors import (ApiError, context_exceeded, queue_full, server_stopped,
                                       unknown_model)
from mlxchat.server.core.idle_join import IdleJoins
from mlxchat.server.core.kv_budget import Eviction, KvBudget
from mlxchat.server.core.lane import EngineLane, QueueFull, Work
from mlxchat.server.core.requests import ChatRequest
from mlxchat.server.core.slots import open_slots
from mlxchat.server.core.tool_calls import (CallCut, ReplyParts, calls_signature, reply_parts,
                                           with_ids)
from mlxchat.session.conversation import Conversation
from mlxchat.session.lock import SessionBusy
from mlxchat.store import SessionStore
from mlxchat.turn_stats import TurnStats

log = logging.getLogger(__name__)

COUNTED_CHARS = 256 * 1024
"""Requests with more text than this are counted off the lane before they
queue: tokenizing them there would hold up every request behind them."""


@dataclass
class Piece:
    """New text of the reply: its answer or its reasoning."""

    text: str
    part: str = "answer"
    cache_miss: str | None = None
    """On a reply's first piece: why its conversation's KV was recomputed
    (its files were evicted), for the response's headers."""


@dataclass
class Finished:
    """The end of a reply: what the client saw of it and the turn's figures."""

    content: str
    reasoning: str
    stats: TurnStats
    finish_reason: str
    session_id: int | None
    """None for a raw completion (no session)."""
    tool_calls: tuple[CalledTool, ...] = ()
    cache_miss: str | None = None
    """Why the conversation's KV was recomputed (its files were evicted)."""
    stop_sequence: str | None = None
    """The stop string that ended the reply, if one did."""


def _join_pieces(a: Piece | Finished, b: Piece | Finished) -> Piece | None:
    """Two pieces of the same part that arrived together, as one (fewer chunks
    to encode and send when the client reads slower than the model writes)."""
    if isinstance(a, Piece) and isinstance(b, Piece) and a.part == b.part:
        return Piece(a.text + b.text, a.part, a.cache_miss or b.cache_miss)
    return None


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


def started_unless_gone(events: Iterator[Event], cancelled: threading.Event
                        ) -> Iterator[Event]:
    """``events``, the first asked for inside ``waits_end_on(cancelled)``: a turn
    that waits for the compute lock to start (the chat's engine computes) stops
    waiting when its client goes away."""
    try:
        with waits_end_on(cancelled):
            first = next(events, None)
        if first is None:
            return
        yield first
        yield from events
    finally:
        getattr(events, "close", lambda: None)()


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


class ChatService:
    """One conversation per slot (``parallel``: replies decoded together), one
    engine lane, every endpoint's turns."""

    def __init__(self, conv: Conversation, *, store: SessionStore, engine: Engine,
                 max_waiting: int = 8, kv_budget_bytes: int | None = None,
                 idle_join_s: float | None = None, parallel: int = 1,
                 memory_bytes: int | None = None):
        # ``store``, ``engine``: ``conv``'s, from the composition root. ``idle_join_s``:
        # idle time before a session's files are joined (None: the app's). ``memory_bytes``:
        # what the members' KV may take (None: the settings' budget, or RAM's).
        self.store = store
        self.slots = open_slots(conv, engine, store, parallel)
        self.parallel = len(self.slots.all)
        """Replies decoded at once (``--parallel``; 1 where batching cannot run)."""
        self.admission = admission_for(engine, conv.settings, self.parallel, memory_bytes)
        self.kv_budget = None if kv_budget_bytes is None else KvBudget(store, kv_budget_bytes)
        self.last_eviction: Eviction | None = None
        for slot in self.slots.all:  # an agent's client may send a reply back changed
            slot.conv.cache.prompt_apart = True
        conv.locks.release()  # held per request (``_work``)
        self.recovered = self.turns.recover_left_replies()
        """Replies a killed run was streaming, stored at start (marked stopped)."""
        self.idle_joins = IdleJoins(store, after_s=idle_join_s,
                                    allowed=lambda: not engine.segments_per_rank)
        self.lane = EngineLane(stop_running=self._stop, max_waiting=max_waiting,
                               when_idle=self.idle_joins.run, parallel=self.parallel,
                               on_slot=self.slots.enter, admits=self.admission.admits)
        self.model_id = conv.model_spec
        self.answered = 0
        """Requests answered to their end."""
        self._names = {conv.model_spec, conv.views.model_info.name,
                       Path(conv.model_spec).name, conv.views.model_info.name.split("/")[-1]}

    # -- the slot of the calling thread (the first off the lane) --------------------------
    @property
    def conv(self) -> Conversation:
        return self.slots.here().conv

    @property
    def engine(self) -> Engine:
        return self.slots.here().engine

    @property
    def turns(self) -> ApiTurns:
        return self.slots.here().turns

    @property
    def cache_taken(self) -> bool:  # ``Slot.cache_taken``
        return self.slots.here().cache_taken

    @cache_taken.setter
    def cache_taken(self, value: bool) -> None:
        self.slots.here().cache_taken = value

    def _stop(self, slot: int = 0) -> None:
        self.slots.all[slot].conv.turns.cancel()

    @property
    def window(self) -> int:
        """The context window a turn gets (the model's, or the settings' cap below
        it): no reply can be longer."""
        return self.engine.prompts.window(self.conv.settings.generation)

    def check_model(self, name: str) -> None:
        # Ollama clients add ":latest" to a name listed without a tag.
        base, _, tag = name.rpartition(":")
        untagged = (tag == "latest" and base in self._names
                    and ":" not in base.removeprefix("ollama:"))
        if name not in self._names and not untagged:
            raise unknown_model(name, self.model_id)

    def warm_up(self) -> None:
        """Before the first request (``mlxchat serve`` at start): the engine's
        first-call costs paid now, not by the first client. Never fails the
        start: a model it cannot warm is served cold."""
        try:
            self.engine.warm_up()
        except Exception as exc:  # noqa: BLE001 - an optimisation, not a requirement
            log.warning("warm-up skipped: %s", exc)

    def close(self) -> None:
        self.lane.close()
        self.slots.close()

    async def chat(self, request: ChatRequest) -> AsyncIterator[Piece | Finished]:
        """The reply's pieces, then ``Finished``; errors before the first piece
        are ``ApiError``s. Leaving early (the client went away) cancels the turn."""
        self.check_model(request.model)
        turn = request.turn
        await self.check_fits([m.content for m in turn.messages if m.role != "assistant"]
                              + ([turn.system] if turn.system else []))
        key = conversation_key(self.model_id, turn)
        async for item in self.run(lambda cancelled: self._work(request, cancelled), key=key):
            yield item

    async def check_fits(self, texts: list[str]) -> None:
        """A 400 context_length_exceeded, before the request queues, when
        ``texts`` (all of which the prompt holds; templates may cut replies,
        so those are left out) cannot fit the model's window whatever is reused."""
        try:
            await anyio.to_thread.run_sync(self._fits_at_all, texts)
        except ContextOverflowError as exc:
            raise context_exceeded(exc.user_text()) from None

    def _fits_at_all(self, texts: list[str]) -> None:
        """From a floor computed without tokenizing (milliseconds for 15 MB),
        then, for a large request, counted a piece at a time up to the window:
        on a thread of its own, never the lane's, so no other request waits."""
        engine = self.engine
        window = engine.info.context_window
        refuse_unfittable(engine.loaded.tokenizer, texts, window=window)
        if sum(map(len, texts)) <= COUNTED_CHARS:
            return  # tokenized on the lane in no time
        counted = 0
        for text in texts:
            counted += tokens_at_least(engine.loaded.tokenizer, text, limit=window - counted)
            if counted >= window:
                raise ContextOverflowError(
                    f"The messages are at least {counted:,} tokens; the context window is "
                    f"{window:,} tokens. Shorten them or send less.")

    async def run(self, work: Work, *, key: str | None = None
                  ) -> AsyncIterator[Piece | Finished]:
        """``work``'s items, run in the lane (``key``: its conversation, for the
        lane's fairness); its refusals as ``ApiError``s."""
        try:
            job = self.lane.submit(work, key=key)
        except QueueFull as exc:
            raise queue_full(exc.retry_after_s) from None
        try:
            async for item in job.items(merge=_join_pieces):
                if isinstance(item, Finished):
                    self.answered += 1
                    note_turn(item.session_id, item.stats)
                yield item
        except ContextOverflowError as exc:
            raise context_exceeded(exc.user_text()) from None
        except ApiError:
            raise
        except SessionBusy as exc:  # another process has the session open
            raise ApiError(409, exc.user_text(), code="session_busy") from None
        except MlxchatError as exc:
            raise ApiError(400, exc.user_text(), code="invalid_request") from None
        except ValueError as exc:  # a setting out of range
            raise ApiError(400, str(exc), code="invalid_value") from None
        finally:
            self.lane.cancel(job)

    def _stopped(self, done: TurnDone, kept: str) -> None:
        """The engine was stopped for a stop string: the reply finished there,
        its ids cut where its text (``kept``) ends (dropped when they cannot be:
        the next turn renders the text), so the ledger holds what the client saw."""
        last = self.conv.messages[-1] if self.conv.messages else None
        # Cancelled by the watch, or ended by max_tokens on the token that matched.
        if last is not None and last.role == "assistant" and last.id is not None:
            ids = ids_up_to(self.engine.loaded.tokenizer, last.token_ids or [],
                            done.reply, len(kept)) if last.token_ids else None
            self.store.mark_stopped(last.id, token_ids=ids)
            self.conv.reload()
        done.stats.finish_reason = "stop"

    def _work(self, request: ChatRequest, cancelled: threading.Event
              ) -> Iterator[Piece | Finished]:
        """On the lane's thread: the request holds its session (``ApiTurns``)
        until it ends; between requests the chat or another process may open it."""
        if cancelled.is_set():
            return
        try:
            yield from self._turn(request, cancelled)
        except WaitCancelled:  # its client left while it waited for the compute lock
            self.cache_taken = True
        finally:
            self.conv.locks.release()
            if self.conv.session.id is not None:
                self.lane.idle_work_in(self.idle_joins.used(self.conv.session.id))

    def _turn(self, request: ChatRequest, cancelled: threading.Event
              ) -> Iterator[Piece | Finished]:
        """Place the request, run its turn, yield its pieces."""
        watch = StopWatch(request.stop)
        tokenizer = self.engine.loaded.tokenizer
        tools = request.turn.tools is not None
        cut = CallCut(call_markup(tokenizer) if tools else None)

        parsed: dict[str, tuple[ReplyParts, tuple[CalledTool, ...]]] = {}

        def parts() -> tuple[ReplyParts, tuple[CalledTool, ...]]:
            """Indexing the reply and answering it read it once (the calls' ids too)."""
            if watch.seen not in parsed:
                parsed.clear()
                reply = reply_parts(tokenizer, watch.seen, tools=tools)
                parsed[watch.seen] = reply, with_ids(reply.calls)
            return parsed[watch.seen]

        def reply_form(done: TurnDone) -> IncomingMessage:
            seen, calls = parts()  # as the client will send it back
            return IncomingMessage("assistant", seen.content, calls_signature(calls), calls)

        with waits_end_on(cancelled):  # setup waits no longer than its client
            if self.cache_taken:  # the branch's KV from disk
                self.cache_taken = False
                self.conv.cache.restore()
            turn = self.turns.begin(request.turn, reply_form)
        miss = self.kv_budget.reason_for(turn.session_id) if self.kv_budget else None
        unsaid = miss
        done: TurnDone | None = None
        for event in started_unless_gone(turn.events, cancelled):
            if cancelled.is_set() or watch.stopped:
                self.conv.turns.cancel()  # also a turn that started after the cancel
            if isinstance(event, TextDelta):
                text = event.text if event.part == "reasoning" \
                    else cut.feed(watch.feed(event.text))
                if text:
                    yield Piece(text, event.part, unsaid)
                    unsaid = None
            elif isinstance(event, TurnDone):
                done = event
        if done is None:
            return
        if watch.stopped:
            self._stopped(done, watch.seen)
        elif done.stats.finish_reason == "cancelled":
            # Not the client's doing (it is gone, or it would have been a stop
            # string): the server is stopping. Said as an error, never as a
            # reply that finished; the part already sent is stored as cancelled.
            raise server_stopped()
        rest = cut.feed(watch.flush())
        if rest:
            yield Piece(rest, cache_miss=unsaid)
        reply, calls = parts()
        reason = "tool_calls" if calls else "stop" if watch.stopped else {
            "length": "length"}.get(done.stats.finish_reason, "stop")
        if self.kv_budget is not None:  # before the end goes out: done when the client sees it
            self.last_eviction = self.kv_budget.enforce(in_use=turn.session_id)
        yield Finished(reply.content, done.reasoning, done.stats, reason, turn.session_id,
                       calls, cache_miss=miss, stop_sequence=watch.matched)
