"""The chat service behind every endpoint: a request becomes a turn on the one
conversation, run in the engine lane; what it says comes back as pieces the
endpoints put in their own shapes."""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import anyio

from mlxchat.engine.events import (ChoiceDone, ContextOverflowError, Event, PrefillProgress,
                                   TextDelta, TurnDone)
from mlxchat.engine.interface import Engine
from mlxchat.engine.prompt.fit import refuse_unfittable
from mlxchat.engine.thread.compute import WaitCancelled
from mlxchat.engine.thread.worker import waits_end_on
from mlxchat.errors import MlxchatError
from mlxchat.models.token_floor import tokens_at_least
from mlxchat.server.core.access_log import note_first_token, note_turn
from mlxchat.server.core.admission import admission_for
from mlxchat.server.core.api_turns import ApiRequest, ApiTurns, IncomingMessage, conversation_key
from mlxchat.server.core.errors import (ApiError, context_exceeded, queue_full, server_stopped,
                                       unknown_model)
from mlxchat.server.core.idle_join import IdleJoins
from mlxchat.server.core.kv_budget import Eviction, KvBudget
from mlxchat.server.core.lane import EngineLane, QueueFull, Work
from mlxchat.server.core.requests import ChatRequest
from mlxchat.server.core.reply_items import Finished, Piece, Planned, Readers, join_pieces
from mlxchat.server.core.reply_reader import ids_up_to
from mlxchat.server.core.shared_reply import (REJOIN_S, ReplyProgress, SharedReplies,
                                             request_identity)
from mlxchat.server.core.slots import open_slots
from mlxchat.server.core.system_messages import place_system_messages, renders_system_anywhere
from mlxchat.server.core.tool_calls import calls_signature
from mlxchat.session.conversation import Conversation
from mlxchat.session.lock import SessionBusy
from mlxchat.store import SessionStore

log = logging.getLogger(__name__)

COUNTED_CHARS = 256 * 1024
"""Requests with more text than this are counted off the lane before they
queue: tokenizing them there would hold up every request behind them."""


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


class ChatService:
    """One conversation per slot (``parallel``: replies decoded together), one
    engine lane, every endpoint's turns."""

    def __init__(self, conv: Conversation, *, store: SessionStore, engine: Engine,
                 max_waiting: int = 8, kv_budget_bytes: int | None = None,
                 idle_join_s: float | None = None, parallel: int = 1,
                 memory_bytes: int | None = None, rejoin_s: float = REJOIN_S,
                 context_policy: str = "stop"):
        # ``store``, ``engine``: ``conv``'s, from the composition root. ``idle_join_s``:
        # idle time before a session's files are joined (None: the app's). ``memory_bytes``:
        # what the members' KV may take (None: the settings' budget, or RAM's). ``rejoin_s``:
        # how long a turn still reading its prompt outlives its client (``shared_reply``).
        self.store = store
        self.slots = open_slots(conv, engine, store, parallel, policy=context_policy)
        self.context_policy = context_policy
        """Of requests that give none (``serve --context-policy``)."""
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
        self.shared = SharedReplies(rejoin_s=rejoin_s)
        """Replies being computed, which a request asking for the same joins."""
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
        first-call costs paid now, not by the first client, and the session the
        API used last reopened in the first slot with its KV (where the lane
        sends a new conversation first). Never fails the start: a model it
        cannot warm is served cold, a session it cannot reopen restored later."""
        try:
            self.engine.warm_up()
        except Exception as exc:  # noqa: BLE001 - an optimisation, not a requirement
            log.warning("warm-up skipped: %s", exc)
        try:
            self.slots.all[0].turns.reopen_last()
        except Exception as exc:  # noqa: BLE001 - the same
            log.warning("the last session was not reopened: %s", exc)

    def close(self) -> None:
        self.lane.close()
        self.slots.close()

    async def chat(self, request: ChatRequest, *, planned: bool = False
                   ) -> AsyncIterator[Any]:
        """The reply's pieces, then ``Finished``; errors before the first piece
        are ``ApiError``s. The same request already being computed is joined
        (``shared_reply``); leaving early (the client went away) cancels the
        turn once no other request waits for it. ``planned`` (a stream that
        starts before its first token): a ``Planned`` first, once the prefill is
        planned."""
        self.check_model(request.model)
        request.turn = turn = self.placed(request.turn)
        await self.check_fits([m.content for m in self._kept_whole(turn)]
                              + [t for t in (turn.system, turn.prefill) if t])
        key = conversation_key(self.model_id, turn)
        reading = ReplyProgress()
        items, joined = self.shared.listen(
            request_identity(self.model_id, request),
            lambda: self.run(lambda cancelled: self._work(request, cancelled, reading),
                             key=key, members=turn.options.choices), keeps=reading.now)
        try:
            async for item in items:
                if isinstance(item, Planned) and not planned:
                    continue
                if joined and isinstance(item, Finished):
                    note_turn(item.session_id, item.stats, joined=True)
                elif isinstance(item, Finished):  # its ttft from its arrival
                    note_first_token(reading.first_token_at)
                yield item
        finally:
            await items.aclose()  # type: ignore[attr-defined]

    def _kept_whole(self, turn: ApiRequest) -> list[IncomingMessage]:
        """The messages the prompt holds whatever: all but replies; under a
        policy that makes room (compact, drop_oldest) only the new ones."""
        said = [m for m in turn.messages if m.role != "assistant"]
        if turn.settings.get("context_policy", self.context_policy) == "stop":
            return said
        last = max((i for i, m in enumerate(turn.messages) if m.role == "assistant"), default=-1)
        return [m for m in turn.messages[last + 1:] if m.role != "assistant"]

    def placed(self, turn: ApiRequest) -> ApiRequest:
        """``turn`` with its system messages after the first others placed by
        the one rule (``core.system_messages``) for the model served."""
        in_place = renders_system_anywhere(self.engine.loaded.tokenizer)
        return dataclasses.replace(turn, messages=place_system_messages(turn.messages,
                                                                        in_place=in_place))

    async def check_fits(self, texts: list[str]) -> None:
        """A 400 context_length_exceeded, before the request queues, when
        ``texts`` (all of which the prompt holds; templates may cut replies,
        so those are left out) cannot fit the window whatever is reused."""
        try:
            await anyio.to_thread.run_sync(self._fits_at_all, texts)
        except ContextOverflowError as exc:
            raise context_exceeded(exc.user_text()) from None

    def _fits_at_all(self, texts: list[str]) -> None:
        """From a floor computed without tokenizing (milliseconds for 15 MB),
        then, for a large request, counted a piece at a time up to the window:
        on a thread of its own, never the lane's, so no other request waits."""
        engine = self.engine
        window = self.window  # the served one (--context), not only the model's
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

    async def run(self, work: Work, *, key: str | None = None, members: int = 1
                  ) -> AsyncIterator[Piece | Finished]:
        """``work``'s items, run in the lane (``key``: its conversation, for the
        lane's fairness; ``members``: the choices it decodes, each a KV cache
        admission counts); its refusals as ``ApiError``s."""
        # Measured once by a job on the engine's thread: waited for off the event loop.
        too_many = await anyio.to_thread.run_sync(self.admission.refusal, members) \
            if members > 1 else None
        if too_many is not None:
            raise ApiError(400, f"This request cannot run here: {too_many}.", param="n",
                           code="invalid_value")
        try:
            job = self.lane.submit(work, key=key, members=members)
        except QueueFull as exc:
            raise queue_full(exc.retry_after_s) from None
        try:
            async for item in job.items(merge=join_pieces):
                if isinstance(item, Finished) and not item.choice:
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
        # Ended by the engine at the stop string (or by max_tokens on the token
        # that wrote it, or cancelled by the watch where the engine did not see it).
        if last is not None and last.role == "assistant" and last.id is not None:
            ids = ids_up_to(self.engine.loaded.tokenizer, last.token_ids or [],
                            done.reply, len(kept)) if last.token_ids else None
            self.store.mark_stopped(last.id, token_ids=ids)
            self.conv.reload()
        done.stats.finish_reason = "stop"

    def _work(self, request: ChatRequest, cancelled: threading.Event, reading: ReplyProgress
              ) -> Iterator[Piece | Finished]:
        """On the lane's thread: the request holds its session (``ApiTurns``)
        until it ends; between requests the chat or another process may open it."""
        if cancelled.is_set():
            return
        try:
            yield from self._turn(request, cancelled, reading)
        except WaitCancelled:  # its client left while it waited for the compute lock
            self.cache_taken = True
        finally:
            self.conv.locks.release()
            if self.conv.session.id is not None:
                self.lane.idle_work_in(self.idle_joins.used(self.conv.session.id))

    def _turn(self, request: ChatRequest, cancelled: threading.Event, reading: ReplyProgress
              ) -> Iterator[Piece | Finished]:
        """Place the request, run its turn, yield its pieces (each choice's),
        the other choices' ends as they come, then choice 0's."""
        tokenizer = self.engine.loaded.tokenizer
        # Each choice stops sampling where its answer writes a stop string.
        asked = dataclasses.replace(request.turn, options=dataclasses.replace(
            request.turn.options, stops=tuple(request.stop)))
        readers = Readers(tokenizer, request.stop, tools=asked.tools is not None,
                          max_calls=request.max_calls)
        main, alone = readers[0], asked.options.choices == 1

        def reply_form(done: TurnDone) -> IncomingMessage:
            seen, calls = main.parts()  # as the client will send it back
            return IncomingMessage("assistant", (asked.prefill or "") + seen.content,
                                   calls_signature(calls), calls)

        with waits_end_on(cancelled):  # setup waits no longer than its client
            if self.cache_taken:  # the branch's KV from disk
                self.cache_taken = False
                self.conv.cache.restore()
            turn = self.turns.begin(asked, reply_form)
        miss = self.kv_budget.reason_for(turn.session_id) if self.kv_budget else None
        unsaid = miss
        done: TurnDone | None = None
        planned = False
        for event in started_unless_gone(turn.events, cancelled):
            # Another choice still samples after a stop string: the text is cut.
            if cancelled.is_set() or (main.watch.stopped and alone):
                self.conv.turns.cancel()  # also a turn that started after the cancel
            if isinstance(event, PrefillProgress) and not planned:
                planned = True  # the cache was trimmed to what it reuses: it holds that now
                reading.started.set()
                yield Planned(event.cached_tokens + event.total, event.cached_tokens, miss)
            elif isinstance(event, TextDelta):
                reading.saying()
                said = readers.piece(event)
                if said is not None:
                    said.cache_miss, unsaid = unsaid, None
                    yield said
            elif isinstance(event, ChoiceDone):
                yield from readers.other_end(event, asked.options)
            elif isinstance(event, TurnDone):
                done = event
        if done is None:
            return
        if main.watch.stopped:
            self._stopped(done, main.watch.seen)
        elif done.stats.finish_reason == "cancelled":
            # Not the client's doing (it is gone, or it would have been a stop
            # string): the server is stopping. Said as an error, never as a
            # reply that finished; the part already sent is stored as cancelled.
            raise server_stopped()
        rest = readers.rest(0)
        if rest is not None:
            rest.cache_miss = unsaid
            yield rest
        reply, calls = main.parts()
        if self.kv_budget is not None:  # before the end goes out: done when the client sees it
            self.last_eviction = self.kv_budget.enforce(in_use=turn.session_id)
        last = self.conv.messages[-1] if self.conv.messages else None
        yield Finished(reply.content, done.reasoning, done.stats,
                       main.finish_reason(done.stats.finish_reason), turn.session_id, calls,
                       cache_miss=miss, stop_sequence=main.watch.matched,
                       logprobs=readers.figures(0, asked.options),
                       others=tuple(readers.ended),
                       reply_id=last.id if last and last.role == "assistant" else None,
                       recalled=tuple(self.conv.recall.report()))
