"""One engine computes at a time: a process-wide first-come-first-served lock.

The chat's engine and the API server's engine share one model's weights and
the machine's cores (a CPU is compute-bound, a Mac GPU memory-bound): run
together they would each go at half speed and a turn's first token would wait
on the other's whole reply anyway. Every job of an engine thread holds the lock
while it runs (a turn is one job: its decode is never interrupted); typing
prefill passes it on between chunks when someone waits (``pass_on``).
Waiters are served in arrival order, and each says whose it is ('chat',
'api'), so the chat can show what it waits behind. A waiter given a cancel
signal leaves the line when it is set (stop, quit, a client gone), without
waiting for the holder to finish.
"""

from __future__ import annotations

import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Protocol


@dataclass(frozen=True)
class ComputeFigures:
    """What the lock has seen, for tests and the gauges."""

    holds: int
    """Jobs that held it."""
    waited: int
    """Of those, how many found it taken and waited."""
    passed_on: int
    """Times a holder let a waiter go first (typing prefill between chunks)."""


WAIT_STEP_S = 0.05
"""How often a cancellable waiter looks at its cancel signal."""


class CancelSignal(Protocol):
    """What a waiter reads to know it should leave (a ``threading.Event``)."""

    def is_set(self) -> bool: ...


class WaitCancelled(Exception):
    """A job was cancelled while it waited for the lock: it never ran."""


class Ticket:
    """A place in the line; holding when it is first."""

    __slots__ = ("owner", "left")

    def __init__(self, owner: str):
        self.owner = owner
        self.left = False
        """Out of the line while its job still runs (cancelled in ``pass_on``)."""


class ComputeLock:
    """FIFO mutual exclusion between engine threads (not reentrant: one
    ticket per job; a job runs its nested engine calls inline)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._line: deque[Ticket] = deque()  # the first one holds the lock
        self._holds = self._waited = self._passed_on = 0

    def acquire(self, owner: str, *, cancel: CancelSignal | None = None) -> Ticket:
        """Wait for the lock; WaitCancelled (out of the line) once ``cancel`` is set."""
        ticket = Ticket(owner)
        with self._cond:
            self._line.append(ticket)
            if self._line[0] is not ticket:
                self._waited += 1
                while self._line[0] is not ticket:
                    if cancel is not None and cancel.is_set():
                        self._line.remove(ticket)
                        self._cond.notify_all()
                        raise WaitCancelled(f"{owner} job cancelled while waiting")
                    self._cond.wait(WAIT_STEP_S if cancel is not None else None)
            self._enter()
        return ticket

    def release(self, ticket: Ticket) -> None:
        with self._cond:
            if ticket.left:
                return  # it left the line in ``pass_on``: nothing to give back
            assert self._line and self._line[0] is ticket, "released out of turn"
            self._line.popleft()
            self._cond.notify_all()

    @contextmanager
    def held(self, owner: str, *, cancel: CancelSignal | None = None) -> Iterator[Ticket]:
        ticket = self.acquire(owner, cancel=cancel)
        try:
            yield ticket
        finally:
            self.release(ticket)

    def pass_on(self, ticket: Ticket, *, cancel: CancelSignal | None = None) -> None:
        """Held by ``ticket``: when others wait, let them all go first and wait
        for them (the holder keeps its ticket, now at the end of the line).
        ``cancel`` set meanwhile: WaitCancelled, the ticket out of the line (its
        job must compute nothing more; its ``release`` is then a no-op)."""
        with self._cond:
            if len(self._line) < 2 or self._line[0] is not ticket:
                return
            self._passed_on += 1
            self._line.popleft()
            self._line.append(ticket)
            self._cond.notify_all()
            while self._line[0] is not ticket:
                if cancel is not None and cancel.is_set():
                    self._line.remove(ticket)
                    ticket.left = True
                    self._cond.notify_all()
                    raise WaitCancelled(f"{ticket.owner} job cancelled while it let others go")
                self._cond.wait(WAIT_STEP_S if cancel is not None else None)
            self._enter()

    def step_out(self, ticket: Ticket) -> None:
        """Held by ``ticket``: leave the line while its job waits on others'
        compute (a batched reply waits for the batch's steps)."""
        with self._cond:
            assert self._line and self._line[0] is ticket, "stepped out of turn"
            self._line.popleft()
            self._cond.notify_all()

    def step_in(self, ticket: Ticket) -> None:
        """Back into the line after ``step_out``; returns holding the lock."""
        with self._cond:
            self._line.append(ticket)
            self._cond.notify_all()
            while self._line[0] is not ticket:
                self._cond.wait()
            self._enter()

    def _enter(self) -> None:
        self._holds += 1

    def awaited(self) -> bool:
        """Someone waits in the line (read without the lock: a hint, checked
        between decode steps)."""
        return len(self._line) > 1

    def ahead_of(self, owner: str) -> list[str]:
        """Whose tickets are ahead of ``owner``'s first one waiting (the holder
        first); [] when ``owner`` holds the lock or does not wait for it."""
        with self._cond:
            line = list(self._line)
        for i, ticket in enumerate(line):
            if ticket.owner == owner:
                return [t.owner for t in line[:i]]
        return []

    def figures(self) -> ComputeFigures:
        with self._cond:
            return ComputeFigures(self._holds, self._waited, self._passed_on)


PROCESS_LOCK = ComputeLock()
"""Every engine of this process computes under it unless given another."""
