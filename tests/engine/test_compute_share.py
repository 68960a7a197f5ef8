"""Two real engines over the tiny model under one private compute lock: typing
prefill lets an API turn run between its chunks, and a turn stopped while it
waits behind the other engine ends at once, having computed nothing."""

from __future__ import annotations

import threading

import pytest

from mlxchat.engine.core import ChatEngine
from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.engine.thread.compute import ComputeLock
from mlxchat.engine.turn.ranks import OneProcess

from tests.engine.conftest import GREEDY, conversation, run
from tests.waiting import BOUND_S, until


class LockThatWaitsForTheApi(ComputeLock):
    """The lock the chat's typing prefill passes on: before its first pass-on it
    waits (bounded) until an API job is in line, so the pass-on is certain; what
    the API engine held after each pass-on is noted."""

    def __init__(self) -> None:
        super().__init__()
        self.api: ChatEngine | None = None
        self.api_held_after_pass_on: list[int] = []

    def pass_on(self, ticket, *, cancel=None) -> None:
        if ticket.owner != "chat":
            return super().pass_on(ticket, cancel=cancel)
        if not self.api_held_after_pass_on:
            until(lambda: self.ahead_of("api") == ["chat"])
        super().pass_on(ticket, cancel=cancel)
        self.api_held_after_pass_on.append(len(self.api.cached_tokens))


class Gate(OneProcess):
    """The API engine's ranks (one process): each turn, holding the lock,
    waits for ``go`` before it computes."""

    def __init__(self) -> None:
        self.entered, self.go = threading.Event(), threading.Event()

    def begin_turn(self, settings):
        self.entered.set()
        assert self.go.wait(BOUND_S)
        return settings


def typing_prefill(chat: ChatEngine, tiny) -> tuple[threading.Thread, list[int], list[int]]:
    """The chat's typing prefill of a long text on a thread of its own, started
    and holding the lock: the thread, the tokens and what it returns (once)."""
    tokens = tiny.tokenizer.encode("The rivers, the harvests and the coast. " * 12)
    holds = chat.compute.figures().holds
    typed: list[int] = []
    typing = threading.Thread(target=lambda: typed.append(chat.prefill(tokens, GREEDY)))
    typing.start()
    until(lambda: chat.compute.figures().holds > holds)  # the prefill holds the lock
    return typing, tokens, typed


def test_an_api_turn_runs_between_typing_prefill_chunks(tiny):
    lock = LockThatWaitsForTheApi()
    chat = ChatEngine(tiny, compute=lock, chunk_seconds=1e-4)
    api = ChatEngine(tiny, compute=lock, compute_owner="api")
    lock.api = api
    try:
        before = lock.figures()
        typing, tokens, typed = typing_prefill(chat, tiny)
        done = run(api, conversation(1))
        typing.join(BOUND_S)
        after = lock.figures()
        assert done.reply and done.stats.finish_reason in ("stop", "length")
        assert after.passed_on > before.passed_on
        # The API's whole turn ran inside the first pass-on, not after the prefill.
        assert lock.api_held_after_pass_on[0] == done.stats.context_used > 0
        assert typed == [len(tokens)] and chat.cached_tokens == tokens
    finally:
        chat.close()
        api.close()


def test_a_turn_stopped_while_it_waits_ends_at_once_having_run_nothing(tiny):
    lock = ComputeLock()
    chat = ChatEngine(tiny, compute=lock)
    gate = Gate()
    api = ChatEngine(tiny, compute=lock, compute_owner="api", ranks=gate)
    try:
        api_done: list[TurnDone] = []
        api_turn = threading.Thread(target=lambda: api_done.append(run(api, conversation(1))))
        api_turn.start()
        assert gate.entered.wait(BOUND_S)
        events: list = []
        chat_turn = threading.Thread(
            target=lambda: events.extend(chat.turn(conversation(2), GREEDY)))
        chat_turn.start()
        until(lambda: lock.ahead_of("chat") == ["api"])
        chat.cancel()
        chat_turn.join(BOUND_S)
        assert not chat_turn.is_alive()
        assert not gate.go.is_set() and api_turn.is_alive()  # the API's turn still holds it
        assert not any(isinstance(e, (TextDelta, TurnDone)) for e in events)
        assert chat.cached_tokens == [] and lock.ahead_of("chat") == []
        gate.go.set()
        api_turn.join(BOUND_S)
        assert api_done and api_done[0].reply
        # The stopped turn left nothing behind: the next one runs whole.
        assert run(chat, conversation(2)).stats.finish_reason in ("stop", "length")
    finally:
        gate.go.set()
        chat.close()
        api.close()


@pytest.mark.parametrize("stop", ["a turn", "closing"])
def test_typing_prefill_that_let_the_api_go_first_stops_waiting_when_stopped(tiny, stop):
    lock = LockThatWaitsForTheApi()
    chat = ChatEngine(tiny, compute=lock, chunk_seconds=1e-4)
    gate = Gate()
    api = ChatEngine(tiny, compute=lock, compute_owner="api", ranks=gate)
    lock.api = api
    try:
        typing, _, typed = typing_prefill(chat, tiny)
        api_done: list[TurnDone] = []
        api_turn = threading.Thread(target=lambda: api_done.append(run(api, conversation(1))))
        api_turn.start()
        assert gate.entered.wait(BOUND_S)  # let in by the pass-on; holds the lock now
        until(lambda: lock.ahead_of("chat") == ["api"])  # the prefill waits to resume
        if stop == "a turn":
            chat.supersede_typing()
        else:
            chat.close()
        typing.join(BOUND_S)
        assert not typing.is_alive() and typed == [0]
        assert api_turn.is_alive() and not gate.go.is_set()  # ended while the API holds on
        assert lock.ahead_of("chat") == []
        gate.go.set()
        api_turn.join(BOUND_S)
        assert api_done and api_done[0].reply
        if stop == "a turn":  # the lock is whole: the chat's next turn runs
            assert run(chat, conversation(2)).stats.finish_reason in ("stop", "length")
        until(lambda: len(lock._line) == 0)  # the API's background jobs end too
    finally:
        gate.go.set()
        chat.close()
        api.close()
