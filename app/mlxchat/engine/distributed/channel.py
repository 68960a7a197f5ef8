"""Jobs from rank 0 to the other ranks over MLX's own collectives.

Every message is an ``all_sum`` in which rank 0 contributes the data and the
others zeros, so each rank receives rank 0's bytes: a two-number header
(kind, length), then for a job its JSON payload. The calls must happen in the
same order on every rank, as the model's own collectives do; a lost peer
surfaces as ``RankLost`` (MLX's ring backend raises when a socket closes).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

import mlx.core as mx

from mlxchat.engine.events import EngineError

JOB, GO_ON, STOP = 1, 2, 3
"""Header kinds: a job (a payload follows), and the two decode flags."""


NOT_ACROSS_RANKS = "not available with a model split across ranks yet"
"""How a refusal of something a split model cannot do yet ends."""


class RankLost(EngineError):
    """A rank stopped answering: its process ended or its link dropped."""


@dataclass(frozen=True)
class RankMessage:
    kind: int
    job: dict[str, Any] | None = None


def _lost(exc: BaseException) -> RankLost:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return RankLost(f"a rank stopped answering ({reason})")


class Channel:
    """The sending (rank 0) or receiving (other ranks) end, over ``group``."""

    def __init__(self, group: Any):
        self.group = group
        self.rank = group.rank()
        self.size = group.size()
        self.lost: RankLost | None = None
        """Set once a collective failed: the ranks are out of step for good."""
        self.progress_at = time.monotonic()
        """When the last collective of this channel finished."""

    def _collective(self, op: Callable[..., mx.array], data: mx.array) -> mx.array:
        if self.lost is not None:
            raise self.lost
        try:
            out = op(data, group=self.group)
            mx.eval(out)
            self.progress_at = time.monotonic()
            return out
        except RuntimeError as exc:
            raise self.failed(exc) from None

    def _sum(self, data: mx.array) -> mx.array:
        return self._collective(mx.distributed.all_sum, data)

    def _gather(self, data: mx.array) -> mx.array:
        return self._collective(mx.distributed.all_gather, data)

    def send(self, op: str, **args: Any) -> None:
        """Rank 0: send a job ``{"op": op, **args}`` to every other rank."""
        raw = json.dumps({"op": op, **args}, separators=(",", ":")).encode()
        self._sum(mx.array([JOB, len(raw)], dtype=mx.int32))
        self._sum(mx.array(list(raw), dtype=mx.uint8))

    def flag(self, kind: int) -> None:
        """Rank 0: tell a decoding rank to go on (GO_ON) or stop (STOP)."""
        self._sum(mx.array([kind, 0], dtype=mx.int32))

    def receive(self) -> RankMessage:
        """Another rank: wait for rank 0's next message."""
        kind, length = self._sum(mx.zeros((2,), dtype=mx.int32)).tolist()
        if kind != JOB:
            return RankMessage(kind)
        raw = bytes(self._sum(mx.zeros((length,), dtype=mx.uint8)).tolist())
        return RankMessage(JOB, json.loads(raw))

    def gather(self, mine: dict[str, Any]) -> list[dict[str, Any]]:
        """Every rank: each rank's ``mine``, in rank order (an ``all_gather`` of
        the lengths, then of the JSON padded to the longest)."""
        raw = json.dumps(mine, separators=(",", ":")).encode()
        lengths = self._gather(mx.array([len(raw)], dtype=mx.int32)).tolist()
        width = max(lengths)
        padded = mx.array(list(raw + b" " * (width - len(raw))), dtype=mx.uint8)
        rows = self._gather(padded).reshape(self.size, width).tolist()
        return [json.loads(bytes(row[:n])) for row, n in zip(rows, lengths)]

    def give_up(self, reason: str) -> RankLost:
        """Declare the ranks lost (one hangs): every later call refuses at once."""
        if self.lost is None:
            self.lost = RankLost(reason)
        return self.lost

    def failed(self, exc: RuntimeError) -> RankLost:
        """Note that a collective inside the model failed (a rank was lost)."""
        if self.lost is None:
            self.lost = _lost(exc)
        return self.lost
