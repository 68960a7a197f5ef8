"""Whether one more batch member fits in memory: each member's KV cache may
grow to the context window, so N members need N times that beside the
weights. The next request waits (queued, the reason logged once) while the
members running leave no room for one more; one alone always runs (the fit
check at load time said what it can hold)."""

from __future__ import annotations

import logging
from typing import Any, Callable

from mlxchat.chat import human_bytes
from mlxchat.models.memory import available_memory

log = logging.getLogger("mlxchat.server.core.admission")

SHARE_OF_RAM = 0.75
"""Of the available memory, what KV caches may take unless a budget is set
(the gauge's rule: ``Settings.memory_budget_bytes``)."""


class Admission:
    """``admits(running)``: may a member join ``running`` ones."""

    def __init__(self, *, member_bytes: Callable[[], int], budget_bytes: int | None):
        self._member_bytes = member_bytes
        self._per_member: int | None = None
        if budget_bytes is None:
            available = available_memory()
            budget_bytes = int(available.bytes * SHARE_OF_RAM) if available else None
        self.budget_bytes = budget_bytes
        self.reason: str | None = None
        """Why the last request was held back (None: none was)."""

    @property
    def per_member(self) -> int:
        """KV bytes of one member at the full window (measured once)."""
        if self._per_member is None:
            self._per_member = self._member_bytes()
        return self._per_member

    def members_fit(self) -> int | None:
        """How many members' KV fits the budget (None: no budget known)."""
        if self.budget_bytes is None:
            return None
        return max(1, self.budget_bytes // max(1, self.per_member))

    def admits(self, running: int) -> bool:
        fit = self.members_fit()
        if fit is None or running + 1 <= fit:
            return True
        reason = (f"a request waits: {running + 1} conversations' KV caches at the full "
                  f"window ({human_bytes(self.per_member)} each) would not fit in "
                  f"{human_bytes(self.budget_bytes or 0)}; {fit} at once fit")
        if reason != self.reason:
            log.info("%s", reason)
        self.reason = reason
        return False


def admission_for(engine: Any, settings: Any, parallel: int,
                  memory_bytes: int | None) -> Admission:
    """The check for ``parallel`` members of ``engine``'s model, each at the
    settings' window; ``memory_bytes`` (else the settings' budget, else RAM's)
    is what their KV may take. Measured and said at start when batching."""
    window = engine.prompts.window(settings.generation)
    admission = Admission(member_bytes=lambda: engine.kv_bytes_per_token() * window,
                          budget_bytes=memory_bytes or settings.memory_budget_bytes)
    if parallel > 1:
        fit = admission.members_fit()
        log.info("decoding up to %d conversations at once; %s of KV each at the full "
                 "window (%s)", parallel, human_bytes(admission.per_member),
                 f"{fit} fit in memory" if fit else "no memory limit known")
    return admission
