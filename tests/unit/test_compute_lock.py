"""The compute lock's promises, on a private ``ComputeLock`` driven by threads:
first come first served, ``pass_on`` lets the waiters go first, ``ahead_of``
names whose tickets are ahead, a cancelled waiter leaves the line at once,
and no two holders are ever inside together (counted by the holders)."""

from __future__ import annotations

import threading
import time

import pytest

from mlxchat.engine.thread.compute import ComputeLock, WaitCancelled

from tests.waiting import BOUND_S, until


def waiting(lock: ComputeLock) -> int:
    """Tickets in the line behind the holder."""
    return max(0, len(lock._line) - 1)


class Holder(threading.Thread):
    """Takes the lock as ``owner``, notes its name in ``order``, holds it
    until ``go`` is set."""

    def __init__(self, lock: ComputeLock, owner: str, order: list[str], *,
                 cancel: threading.Event | None = None):
        super().__init__(daemon=True)
        self.lock, self.owner, self.order, self.cancel = lock, owner, order, cancel
        self.go = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.lock.held(self.owner, cancel=self.cancel):
                self.order.append(self.owner)
                self.go.wait(BOUND_S)
        except WaitCancelled as exc:
            self.error = exc


def in_line(lock: ComputeLock, order: list[str], *owners: str) -> list[Holder]:
    """Threads that queue one after the other, in ``owners`` order."""
    holders = []
    for owner in owners:
        holder = Holder(lock, owner, order)
        before = len(lock._line)
        holder.start()
        until(lambda: len(lock._line) > before)
        holders.append(holder)
    return holders


def test_waiters_are_served_in_arrival_order():
    lock, order = ComputeLock(), []
    holders = in_line(lock, order, "first", "b", "c", "d")
    assert order == ["first"] and waiting(lock) == 3
    for holder in holders:
        holder.go.set()
        holder.join(BOUND_S)
    assert order == ["first", "b", "c", "d"]
    figures = lock.figures()
    assert (figures.holds, figures.waited) == (4, 3)


def test_ahead_of_names_the_holder_then_the_waiters_in_front():
    lock, order = ComputeLock(), []
    holders = in_line(lock, order, "chat", "api", "chat")
    assert lock.ahead_of("api") == ["chat"]
    assert lock.ahead_of("nobody") == []
    for holder in holders:
        holder.go.set()
        holder.join(BOUND_S)
    assert lock.ahead_of("chat") == [] and lock.ahead_of("api") == []


def test_pass_on_lets_every_waiter_go_first_then_resumes():
    lock, order = ComputeLock(), []
    ticket = lock.acquire("chat")
    order.append("chat")
    assert lock.pass_on(ticket) is None and lock.figures().passed_on == 0  # nobody waits
    api = in_line(lock, order, "api", "api2")
    for holder in api:
        holder.go.set()
    lock.pass_on(ticket)  # returns once both have held it and let go
    order.append("chat again")
    lock.release(ticket)
    assert order == ["chat", "api", "api2", "chat again"]
    assert lock.figures().passed_on == 1 and lock._line == type(lock._line)()


def test_a_cancelled_waiter_leaves_the_line_without_waiting_for_the_holder():
    lock, order = ComputeLock(), []
    [holder] = in_line(lock, order, "api")
    cancel = threading.Event()
    stopped = Holder(lock, "chat", order, cancel=cancel)
    stopped.start()
    until(lambda: lock.ahead_of("chat") == ["api"])
    [behind] = in_line(lock, order, "later")
    cancel.set()
    stopped.join(BOUND_S)
    assert not stopped.is_alive() and holder.is_alive()  # out while the holder holds on
    assert isinstance(stopped.error, WaitCancelled)
    assert lock.ahead_of("later") == ["api"]  # its place is gone; the holder holds on
    holder.go.set()
    behind.go.set()
    behind.join(BOUND_S)
    assert order == ["api", "later"]
    assert lock.figures().holds == 2


def test_a_cancel_set_before_it_waits_never_runs_it():
    lock, order = ComputeLock(), []
    [holder] = in_line(lock, order, "api")
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(WaitCancelled):
        lock.acquire("chat", cancel=cancel)
    assert lock.ahead_of("chat") == []
    holder.go.set()
    holder.join(BOUND_S)
    # A free lock is taken whatever the signal says: the job runs and reads it itself.
    lock.release(lock.acquire("chat", cancel=cancel))


def test_no_two_holders_are_ever_inside_together():
    lock = ComputeLock()
    inside = most = 0
    guard = threading.Lock()

    def hold_a_while() -> None:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        time.sleep(0)  # let another thread try
        with guard:
            inside -= 1

    def hammer(owner: str) -> None:
        for _ in range(200):
            with lock.held(owner) as ticket:
                hold_a_while()
                lock.pass_on(ticket)
                hold_a_while()

    threads = [threading.Thread(target=hammer, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND_S * 3)
    assert most == 1
    assert lock.figures().holds >= 800


def test_a_cancelled_pass_on_leaves_the_line_while_the_other_holds_on():
    lock, order = ComputeLock(), []
    ticket = lock.acquire("chat")
    [api] = in_line(lock, order, "api")
    cancel = threading.Event()
    failed: list[BaseException] = []

    def typing_prefill() -> None:
        try:
            lock.pass_on(ticket, cancel=cancel)
        except WaitCancelled as exc:
            failed.append(exc)
        lock.release(ticket)  # as the job's ``held`` does: nothing to give back
    passing = threading.Thread(target=typing_prefill, daemon=True)
    passing.start()
    until(lambda: order == ["api"])  # the API holds it; the chat waits to resume
    cancel.set()
    passing.join(BOUND_S)
    assert not passing.is_alive() and api.is_alive()  # out while the API holds on
    assert len(failed) == 1 and lock.ahead_of("chat") == []
    [later] = in_line(lock, order, "later")
    api.go.set()
    later.go.set()
    later.join(BOUND_S)
    assert order == ["api", "later"] and len(lock._line) == 0
