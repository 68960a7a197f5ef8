"""The KV cache on disk, while the app is idle: once a session has been idle a
while after a turn, its branch's segment files are joined into one (a reopen
then reads one file per branch, not one per turn)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from mlxchat.session import compaction

if TYPE_CHECKING:
    from textual.timer import Timer

    from mlxchat.session.conversation import Conversation

class IdleCompaction:
    """One per app; ``later`` and ``if_idle`` on the UI thread."""

    def __init__(self, app: Any):
        self.app = app
        """The MlxChatApp (not imported: it imports this module)."""
        self.timer: Timer | None = None

    def later(self) -> None:
        """Join the branch's files once it has been idle ``compaction.IDLE_JOIN_S``."""
        if self.timer is not None:
            self.timer.stop()
        self.timer = self.app.set_timer(compaction.IDLE_JOIN_S, self.if_idle)

    def if_idle(self) -> None:
        app = self.app
        if app.conversation is None or app.generating or app.running:
            return  # the next turn's end asks again
        self.join(app.conversation)

    def join(self, conv: Conversation) -> None:
        # On a worker: it waits for a turn's segment being written (and a turn
        # waits for it), the cache keeper serializes them. Never raises; a
        # failure is logged.
        self.app.run_worker(partial(conv.cache.compact), thread=True, group="compact",
                            exclusive=True, exit_on_error=False)
