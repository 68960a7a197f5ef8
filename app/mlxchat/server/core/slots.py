"""The server's slots: with ``--parallel N``, N conversations over one model
(the first the server was opened with, the others opened beside it on the
same database, sharing its weights), each with its own engine, thread and
live cache, whose replies decode together in one batch
(``engine/batch``). A request runs in one slot; the lane's thread of that
slot says which (``Slots.enter``), and the service reads its conversation,
engine and turns from it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import partial

from mlxchat.engine.batch.decoder import BatchDecoder
from mlxchat.engine.core import ChatEngine
from mlxchat.engine.interface import Engine
from mlxchat.server.core.api_turns import ApiTurns
from mlxchat.session.conversation import Conversation
from mlxchat.session.root import open_conversation
from mlxchat.store import SessionStore, open_store

SLOT_HOLDER = "the API server"
"""How a session refusal names a slot's conversation."""
DRAIN_S = 10.0
"""At close, how long a member from outside the slots (the chat beside the
server) may take to leave the batch before it is told the batch closed."""


@dataclass
class Slot:
    conv: Conversation
    engine: Engine
    turns: ApiTurns
    cache_taken: bool = False
    """A raw completion used its live cache, or a request left before its
    branch's KV was back: its next turn restores."""
    opened_here: bool = False
    """Opened by ``open_slots``: shut down with them."""


class Slots:
    """The slots, and which one the calling thread works in (the first when
    it is not a lane's thread)."""

    def __init__(self, slots: list[Slot], batch: BatchDecoder | None):
        self.all, self.batch = slots, batch
        self._here = threading.local()

    def enter(self, index: int) -> None:
        self._here.index = index

    def here(self) -> Slot:
        return self.all[getattr(self._here, "index", 0)]

    def close(self) -> None:
        for slot in self.all:
            if slot.opened_here:
                slot.conv.shutdown()
        if self.batch is not None:  # after its members
            self.batch.close(drain_s=DRAIN_S)


def _engine(loaded, owner: str, kind: type[ChatEngine] = ChatEngine) -> Engine:
    # The first slot's engine owns the weights' dtype; the others follow it.
    return kind(loaded, compute_owner=owner, casts_weights=False)


def open_slots(conv: Conversation, engine: Engine, store: SessionStore, parallel: int, *,
               policy: str = "stop") -> Slots:
    """``parallel`` slots, the first over ``conv``; one batch for them all;
    ``policy``: the context policy of requests that give none."""
    first = Slot(conv, engine, ApiTurns(conv, store, policy=policy))
    if parallel <= 1 or not isinstance(engine, ChatEngine) or engine.segments_per_rank \
            or not conv.saved.database:
        return Slots([first], None)
    batch = BatchDecoder(engine.loaded.model, size=parallel, compute=engine.compute)
    engine.decode_in(batch)
    slots = [first]
    loaded = conv.views.loaded
    try:
        for i in range(1, parallel):
            opened = open_conversation(
                conv.settings, model_spec=conv.model_spec,
                store_factory=partial(open_store, conv.saved.database),
                load_model=lambda spec, progress=None: loaded,
                engine_factory=partial(_engine, owner=f"api-{i}", kind=type(engine)),
                lock_holder=SLOT_HOLDER)
            other = opened.conversation
            other.locks.release()  # held per request
            opened.engine.decode_in(batch)
            slots.append(Slot(other, opened.engine, ApiTurns(other, opened.store, policy=policy),
                              opened_here=True))
    except BaseException:
        Slots(slots, batch).close()
        raise
    return Slots(slots, batch)
