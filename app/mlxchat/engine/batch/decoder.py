"""The batch: members joined between decode steps, one forward pass over all
of them a step, each row sampled by its own member's sampler and processors.

Runs on a thread of its own and computes under the process's compute lock,
one step a hold, so a newcomer's prefill (which passes the lock on between
its chunks) interleaves with the others' decode. A step waits until every
member asked for its next token (they read their tokens in lockstep; a
member's reading is Python only). A member leaving is taken out before the
next step, its cache extracted back to its own layers.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import mlx.core as mx

from mlxchat.engine.batch import caches
from mlxchat.engine.batch.member import Member
from mlxchat.engine.thread.compute import PROCESS_LOCK, ComputeLock

log = logging.getLogger(__name__)

OWNER = "batch"
"""The batch's name in the compute lock's line."""


class BatchDecoder:
    """Decode the replies of up to ``size`` members of one model together."""

    def __init__(self, model: Any, *, size: int, compute: ComputeLock = PROCESS_LOCK):
        self.model, self.size, self.compute = model, size, compute
        self._cond = threading.Condition()
        self._members: list[Member] = []
        self._joining: list[Member] = []
        self._layers: list[Any] | None = None
        self._closed = False
        self.steps = 0
        """Decode steps run (tests count them between a member's tokens)."""
        self.widest = 0
        """The most members one step decoded."""
        self.alone_steps = 0
        """Steps a member took on its own thread, alone (``alone.py``)."""
        self._thread = threading.Thread(target=self._run, name="mlxchat-batch", daemon=True)
        self._thread.start()

    # -- the members' side ---------------------------------------------------------
    def join(self, member: Member) -> None:
        with self._cond:
            if self._closed:
                member.gone(member.layers)
                member.deliver(RuntimeError("the batch was closed"))
                return
            self._joining.append(member)
            self._cond.notify_all()

    def ask(self, member: Member) -> None:
        with self._cond:
            member.wants = True
            self._cond.notify_all()

    def leave(self, member: Member) -> list[Any] | None:
        """Take ``member`` out (between steps); its own layers back."""
        with self._cond:
            member.leaving = True
            self._cond.notify_all()
        return member.wait_gone()

    @property
    def members(self) -> int:
        with self._cond:
            return len(self._members) + len(self._joining)

    def close(self, drain_s: float = 0.0) -> None:
        """Stop the batch: after its members left (waiting up to ``drain_s``
        for those still in it, whose replies go on meanwhile), any left then
        told the batch closed."""
        with self._cond:
            self._cond.wait_for(lambda: not (self._members or self._joining)
                                or self._closed, timeout=drain_s)
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    # -- the batch's thread ------------------------------------------------------------
    def _ready(self) -> bool:
        everyone = self._members + self._joining
        return any(m.leaving for m in everyone) or (
            bool(everyone) and all(m.wants or m.leaving for m in everyone))

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not (self._closed or self._ready()):
                        self._cond.wait()
                    if self._closed:
                        break
                    joining = list(self._joining)  # in ``_joining`` until placed
                with self.compute.held(OWNER):
                    self._regroup(joining)
                    if self._members and all(m.wants for m in self._members):
                        self._step()
        except BaseException as exc:  # noqa: BLE001 - every member is told
            log.exception("the batch's decode failed")
            self._fail(exc)
        finally:
            self._fail(RuntimeError("the batch was closed"))
            mx.synchronize()
            mx.clear_streams()

    def _fail(self, exc: BaseException) -> None:
        with self._cond:
            self._closed = True
            everyone, self._members, self._joining = self._members + self._joining, [], []
        for m in everyone:
            m.deliver(exc)
            m.gone(None)

    def _regroup(self, joining: list[Member]) -> None:
        """Take out the members leaving, then add the newcomers (last rows)."""
        with self._cond:
            leaving = [m for m in self._members if m.leaving]
        for m in leaving:
            i = self._members.index(m)
            own, self._layers = caches.taken_out(self._layers or [], i, len(self._members))
            with self._cond:
                self._members.pop(i)
                self._cond.notify_all()  # a draining ``close`` counts them
            mx.eval([(c.keys, c.values) for c in own])
            m.gone(own)
        for m in joining:
            if m.leaving:  # left before it joined: its layers are its own still
                with self._cond:
                    self._joining.remove(m)
                    self._cond.notify_all()
                m.gone(m.layers)
                continue
            self._layers = caches.joined(self._layers, m.layers or [])
            m.layers = None
            with self._cond:
                self._joining.remove(m)
                self._members.append(m)

    def _step(self) -> None:
        """Feed every member's pending token, sample each one's next."""
        members = self._members
        inputs = mx.concatenate([m.pending.reshape(1) for m in members])[:, None]
        logits = self.model(inputs, cache=self._layers)[:, -1, :]
        sampled = []
        for i, m in enumerate(members):
            row = logits[i:i + 1]
            if m.processors:
                fed = m.pending.reshape(1)
                m.tokens = fed if m.tokens is None else mx.concatenate([m.tokens, fed])
                for processor in m.processors:
                    row = processor(m.tokens, row)
            sampled.append(m.sampler(row - mx.logsumexp(row, keepdims=True)))
        mx.eval(sampled, [(c.keys, c.values) for c in self._layers or []])
        self.steps += 1
        self.widest = max(self.widest, len(members))
        for m, new in zip(members, sampled):
            fed, m.pending = int(m.pending.item()), new
            m.steps += 1
            m.deliver(fed)
